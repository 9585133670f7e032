"""usable_row: rows sharing a stored schedule or payload are parsed and validated once,
and every row is still checked (its own name, its own bad field) as if alone."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Any

import pytest

from celery_gaffer.beat import plan
from celery_gaffer.beat.plan import PART_CACHE, usable_row
from celery_gaffer.exceptions import GafferError
from celery_gaffer.store.schedules import DueSchedule

T0 = datetime(2026, 6, 1, 12, 0, tzinfo=timezone.utc)
CRON = json.dumps({"kind": "cron", "expr": "0 9 * * *", "tz": "Europe/Paris", "jitter": 0.0})


def row(name: str, **overrides: Any) -> DueSchedule:
    fields: dict[str, Any] = {
        "id": 1, "name": name, "task": "t.noop", "schedule": CRON, "args": "[1, 2]",
        "kwargs": '{"a": "b"}', "options": '{"queue": "q"}', "catchup": "latest",
        "starting_deadline": None, "overlap": "allow", "watermark_at": T0,
    }  # fmt: skip
    fields.update(overrides)
    return DueSchedule(**fields)


def test_rows_sharing_their_text_share_the_parsed_parts_and_keep_their_own_names() -> None:
    parts: dict[tuple[Any, ...], Any] = {}
    first, first_payload = usable_row(row("a"), parts)
    second, second_payload = usable_row(row("b", id=2), parts)
    assert (first.name, second.name) == ("a", "b")
    assert second.schedule is first.schedule  # parsed once
    assert second.args == [1, 2]
    assert second.kwargs == {"a": "b"}
    assert second.options == {"queue": "q"}
    assert second_payload == first_payload
    assert len(parts) == 2
    # The same answer as without the cache.
    alone, alone_payload = usable_row(row("b", id=2))
    assert alone == second
    assert alone_payload == second_payload


def test_a_shared_payload_does_not_excuse_a_bad_name_or_a_bad_schedule() -> None:
    parts: dict[tuple[Any, ...], Any] = {}
    usable_row(row("a"), parts)
    with pytest.raises(GafferError, match="name"):
        usable_row(row("  ", id=2), parts)
    with pytest.raises(GafferError):
        usable_row(row("c", id=3, schedule='{"kind": "cron", "expr": "61 * * * *"}'), parts)
    with pytest.raises(GafferError, match="JSON"):
        usable_row(row("d", id=4, schedule="{not json"), parts)
    # A different payload is validated on its own, and refused on its own.
    with pytest.raises(GafferError, match="args"):
        usable_row(row("e", id=5, args='{"not": "a list"}'), parts)


def test_the_cache_is_bounded() -> None:
    parts: dict[tuple[Any, ...], Any] = {}
    for n in range(PART_CACHE):
        usable_row(row(f"s{n}", id=n, args=f"[{n}]"), parts)
    assert len(parts) <= PART_CACHE


def test_rows_sharing_only_their_payload_validate_it_once_and_keep_their_own_schedules(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    validated: list[str] = []
    real = plan.validate_entry

    def counting(**entry: Any) -> Any:
        validated.append(entry["name"])
        return real(**entry)

    monkeypatch.setattr(plan, "validate_entry", counting)
    other = json.dumps({"kind": "cron", "expr": "30 6 * * *", "tz": "UTC", "jitter": 0.0})
    parts: dict[tuple[Any, ...], Any] = {}
    first, _ = usable_row(row("a"), parts)
    second, second_payload = usable_row(row("b", id=2, schedule=other), parts)
    assert validated == ["a"]  # the payload and policy once; the schedule parsed on its own
    assert second.schedule.to_dict()["expr"] == "30 6 * * *"
    assert first.schedule.to_dict()["expr"] == "0 9 * * *"
    # The same answer as without the cache.
    alone, alone_payload = usable_row(row("b", id=2, schedule=other))
    assert alone == second
    assert alone_payload == second_payload
