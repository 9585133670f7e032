"""What a run record keeps of a delivery's arguments and traceback: pure, bounded."""

from __future__ import annotations

import json

from celery_gaffer.protocol import MAX_JSON_DEPTH
from celery_gaffer.runs.details import (
    ARGUMENTS_LIMIT,
    TRACEBACK_LIMIT,
    bounded_arguments,
    bounded_traceback,
    traceback_of,
)


def test_arguments_that_fit_are_kept_as_given_tuples_as_lists() -> None:
    assert bounded_arguments(()) == []
    assert bounded_arguments({}) == {}
    assert bounded_arguments(None) is None
    assert bounded_arguments((1, "a", [2.5, None])) == [1, "a", [2.5, None]]
    assert bounded_arguments({"k": {"n": [1]}}) == {"k": {"n": [1]}}


def test_arguments_just_at_the_limit_are_whole_and_one_more_is_a_preview() -> None:
    fits = ["x" * (ARGUMENTS_LIMIT - 4)]  # '["' + ... + '"]'
    assert len(json.dumps(fits, separators=(",", ":"))) == ARGUMENTS_LIMIT
    assert bounded_arguments(fits) == fits
    over = bounded_arguments(["x" * (ARGUMENTS_LIMIT - 3)])
    assert over == {"truncated": True, "preview": '["' + "x" * (ARGUMENTS_LIMIT - 3) + '"'}


def test_what_is_not_json_is_kept_as_its_repr_bounded() -> None:
    assert bounded_arguments((float("inf"),)) == {"repr": "(inf,)"}
    assert bounded_arguments({"when": object}) == {"repr": "{'when': <class 'object'>}"}
    long = bounded_arguments(({1, 2}, "y" * ARGUMENTS_LIMIT))
    assert long["truncated"] is True
    assert len(long["repr"]) == ARGUMENTS_LIMIT

    class Broken:
        def __repr__(self) -> str:
            raise RuntimeError("no")

    assert bounded_arguments((Broken(),)) == {"repr": "<tuple object>"}


def test_arguments_nested_too_deep_to_read_back_are_kept_as_their_repr() -> None:
    deep: list[object] = []
    for _ in range(MAX_JSON_DEPTH + 1):
        deep = [deep]
    assert set(bounded_arguments(deep)) == {"repr"}
    recursive: list[object] = []
    recursive.append(recursive)
    assert bounded_arguments(recursive) == {"repr": "[[...]]"}


def test_a_traceback_keeps_its_end_under_the_limit_and_no_nul() -> None:
    assert bounded_traceback("short\x00one") == "short\\x00one"
    text = "".join(f"frame {n}\n" for n in range(5000)) + "ValueError: the end"
    kept = bounded_traceback(text)
    assert len(kept) <= TRACEBACK_LIMIT
    first, _, rest = kept.partition("\n")
    assert first == f"… {len(text) - len(rest)} characters cut …"
    assert text.endswith(rest)


def test_the_traceback_is_celerys_else_the_exceptions_own() -> None:
    class Info:
        traceback = "Traceback (most recent call last):\nKeyError: 'x'\n"

    assert traceback_of(KeyError("x"), Info()) == Info.traceback
    try:
        raise KeyError("y")
    except KeyError as exc:
        own = traceback_of(exc)
    assert own is not None
    assert own.rstrip().endswith("KeyError: 'y'")
    assert traceback_of(None) is None
