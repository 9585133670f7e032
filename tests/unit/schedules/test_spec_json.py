"""The JSON checks of an entry's args, kwargs and options, fast path and slow path alike."""

from __future__ import annotations

from typing import Any

import pytest

from celery_gaffer import InvalidInput, every
from celery_gaffer.schedules.spec import MAX_JSON_BYTES, json_value, validate_entry


@pytest.mark.parametrize(
    ("value", "field"),
    [
        ([10**5000], "args"),  # flat: the fast path
        ([[10**5000]], "args"),  # nested: the slow path
        ({"n": 10**5000}, "kwargs"),
        (["\x00"], "args"),
        ({"k": "\ud800"}, "kwargs"),
        (["x" * MAX_JSON_BYTES], "args"),
        ([float("nan")], "args"),
    ],
)
def test_what_cannot_be_stored_is_refused_naming_the_field(value: Any, field: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        validate_entry(name="n", task="t", schedule=every(60), **{field: value})
    assert caught.value.field == field


@pytest.mark.parametrize(
    "value",
    [[], {}, [1, "a", True, None], {"a": 1, "b": "ü", "c": None}, [(1, 2)], {1: "int key"}],
)
def test_a_value_reads_back_as_json_would_give_it(value: Any) -> None:
    import json

    assert json_value(value, "args") == json.loads(json.dumps(value))
