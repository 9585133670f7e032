"""ScheduleStore against real SQLite files and PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from celery import Celery

from celery_gaffer import GafferError, InvalidSchedule, ScheduleStore, cron, every
from celery_gaffer.exceptions import InvalidInput, ScheduleExists, ScheduleNotFound

from ..support import FrozenClock, noop_app


@pytest.fixture
def app(database_url: str) -> Iterator[Celery]:
    with noop_app("store-test", database_url) as app:
        yield app


@pytest.fixture
def store(app: Celery, clock: FrozenClock) -> ScheduleStore:
    return ScheduleStore(app, clock=clock)


def test_add_get_list_round_trip(store: ScheduleStore, clock: FrozenClock) -> None:
    added = store.add(
        "report",
        "t.noop",
        cron("0 9 * * 1-5", "America/New_York"),
        args=[1, "two"],
        kwargs={"x": [3]},
        options={"queue": "reports"},
        gaffer={"catchup": "all", "overlap": "forbid", "grace": 300, "starting_deadline": 600},
    )
    got = store.get("report")
    assert got == added
    assert got.schedule == cron("0 9 * * 1-5", "America/New_York")
    assert (got.args, got.kwargs, got.options) == ([1, "two"], {"x": [3]}, {"queue": "reports"})
    assert (got.policy.catchup, got.policy.overlap, got.policy.grace) == ("all", "forbid", 300.0)
    assert got.source == "db"
    assert got.watermark_at == clock.now
    # 2026-06-01 is a Monday; 09:00 in New York (EDT) is 13:00Z.
    assert got.next_fire_at == clock.now.replace(hour=13)
    assert [s.name for s in store.list()] == ["report"]


def test_add_of_an_existing_name_needs_replace(store: ScheduleStore, clock: FrozenClock) -> None:
    store.add("a", "t.noop", every(60))
    with pytest.raises(ScheduleExists, match="replace=True"):
        store.add("a", "t.noop", every(30))
    assert store.get("a").schedule == every(60)
    clock.advance(45)
    replaced = store.add("a", "t.noop", every(30), replace=True)
    assert replaced.schedule == every(30)
    # The watermark is kept, so a replacement never re-sends a decided fire.
    assert replaced.watermark_at == clock.now - timedelta(seconds=45)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"name": "x", "task": "t.unknown", "schedule": every(5)}, "task"),
        ({"name": "x", "task": "t.noop", "schedule": "every day"}, "schedule"),
        ({"name": "x" * 201, "task": "t.noop", "schedule": every(5)}, "name"),
        ({"name": "", "task": "t.noop", "schedule": every(5)}, "name"),
        ({"name": "x", "task": "t.noop", "schedule": every(5), "args": [object()]}, "args"),
        (
            {"name": "x", "task": "t.noop", "schedule": every(5), "kwargs": {"a": float("inf")}},
            "kwargs",
        ),
        (
            {"name": "x", "task": "t.noop", "schedule": every(5), "gaffer": {"catchup": "some"}},
            "gaffer.catchup",
        ),
        (
            {"name": "x", "task": "t.noop", "schedule": every(5), "gaffer": {"retries": 3}},
            "gaffer.retries",
        ),
        (
            {"name": "x", "task": "t.noop", "schedule": every(5), "gaffer": {"grace": -1}},
            "gaffer.grace",
        ),
    ],
)
def test_bad_input_names_the_field_and_writes_nothing(
    store: ScheduleStore, kwargs: dict[str, Any], field: str
) -> None:
    with pytest.raises(GafferError) as info:
        store.add(**kwargs)
    assert field in str(info.value)
    assert store.list() == []


def test_bad_zone_and_expression_are_invalid_schedules(store: ScheduleStore) -> None:
    with pytest.raises(InvalidSchedule, match="tz"):
        store.add("x", "t.noop", cron("0 3 * * *", "Europe/Atlantis"))
    assert store.list() == []


def test_add_many_writes_chunks_and_reports_a_bad_entry_by_position(store: ScheduleStore) -> None:
    entries = [
        {"name": f"tenant-{i}", "task": "t.noop", "schedule": every(60 + i)} for i in range(25)
    ]
    assert store.add_many(entries, chunk_size=10) == 25
    assert len(store.list()) == 25
    bad = [{"name": f"more-{i}", "task": "t.noop", "schedule": every(60)} for i in range(15)]
    bad[12]["schedule"] = "nonsense"
    with pytest.raises(InvalidSchedule) as info:
        store.add_many(bad, chunk_size=10)
    assert "entry 12" in str(info.value)
    # The first chunk (10) was written; the chunk holding the bad entry was not.
    assert len(store.list()) == 35


def test_add_many_refuses_a_repeated_name_without_writing_its_chunk(store: ScheduleStore) -> None:
    store.add("dup", "t.noop", every(60))
    with pytest.raises(ScheduleExists):
        store.add_many(
            [
                {"name": "new", "task": "t.noop", "schedule": every(5)},
                {"name": "dup", "task": "t.noop", "schedule": every(5)},
            ]
        )
    assert [s.name for s in store.list()] == ["dup"]


def test_update_pause_resume_remove(store: ScheduleStore, clock: FrozenClock) -> None:
    store.add("u", "t.noop", every(60), kwargs={"a": 1})
    updated = store.update("u", kwargs={"a": 2}, gaffer={"catchup": "skip"})
    assert updated.kwargs == {"a": 2}
    assert updated.policy.catchup == "skip"
    assert updated.schedule == every(60)
    with pytest.raises(InvalidInput, match="bogus"):
        store.update("u", bogus=1)

    paused = store.pause("u")
    assert not paused.enabled
    assert paused.next_fire_at is None
    clock.advance(3600)
    resumed = store.resume("u")
    assert resumed.enabled
    # Fires that fell while paused are not owed: the next is the first after now.
    assert resumed.next_fire_at == clock.now + timedelta(seconds=60)

    store.remove("u")
    with pytest.raises(ScheduleNotFound):
        store.get("u")
    with pytest.raises(ScheduleNotFound):
        store.remove("u")


def test_update_of_the_zone_keeps_the_expression_and_starts_from_now(
    store: ScheduleStore, clock: FrozenClock
) -> None:
    store.add("nightly", "t.noop", cron("30 2 * * *", jitter=30), args=[1])
    # 2026-06-02 01:30Z passed while the schedule still fired at 02:30Z.
    clock.advance(13.75 * 3600)  # 2026-06-02 01:45Z
    updated = store.update("nightly", tz="Europe/London")
    assert updated.schedule == cron("30 2 * * *", "Europe/London", jitter=30)
    assert updated.args == [1]
    # 02:30 BST today (01:30Z) fell before the edit: the next fire is tomorrow's.
    assert updated.next_fire_at == datetime(2026, 6, 3, 1, 30, tzinfo=timezone.utc)
    assert updated.watermark_at == clock.now


def test_update_of_other_fields_keeps_the_next_fire(
    store: ScheduleStore, clock: FrozenClock
) -> None:
    added = store.add("nightly", "t.noop", cron("30 2 * * *"))
    clock.advance(3600)
    updated = store.update("nightly", kwargs={"a": 1}, gaffer={"grace": 60})
    assert (updated.next_fire_at, updated.watermark_at) == (added.next_fire_at, added.watermark_at)


def test_update_with_the_same_timing_keeps_the_backlog(
    store: ScheduleStore, clock: FrozenClock
) -> None:
    added = store.add("s", "t.noop", every(60))
    clock.advance(3600)  # Beat was down: an hour of fires is owed
    updated = store.update("s", jitter=0, every=60)
    assert (updated.next_fire_at, updated.watermark_at) == (added.next_fire_at, added.watermark_at)


def test_update_does_not_pause_or_resume(store: ScheduleStore, clock: FrozenClock) -> None:
    store.add("s", "t.noop", every(60))
    store.pause("s")
    clock.advance(3600)
    with pytest.raises(InvalidInput, match=r"gaffer\.enabled: pause or resume"):
        store.update("s", gaffer={"enabled": True})
    assert not store.get("s").enabled
    assert store.update("s", gaffer={"enabled": False, "grace": 5}).policy.grace == 5


def test_update_builds_the_new_timing_from_the_current_one(store: ScheduleStore) -> None:
    store.add("s", "t.noop", every(60, jitter=5))
    assert store.update("s", cron="0 3 * * *").schedule == cron("0 3 * * *", jitter=5)
    assert store.update("s", tz="Asia/Tokyo").schedule == cron("0 3 * * *", "Asia/Tokyo", jitter=5)
    assert store.update("s", cron="0 4 * * *").schedule == cron("0 4 * * *", "Asia/Tokyo", jitter=5)
    assert store.update("s", jitter=0).schedule == cron("0 4 * * *", "Asia/Tokyo")
    assert store.update("s", every=120).schedule == every(120)
    assert store.update("s", schedule=cron("0 5 * * *"), tz="Europe/Paris").schedule == cron(
        "0 5 * * *", "Europe/Paris"
    )


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"cron": "0 3 * * *", "every": 60}, "every"),
        ({"schedule": every(60), "cron": "0 3 * * *"}, "cron"),
        ({"every": 60, "tz": "UTC"}, "tz"),
        ({"tz": "Mars/Olympus"}, "tz"),
        ({"jitter": 90000}, "jitter"),
        ({"tz": "UTC", "gaffer": {"overlap": "sometimes"}}, "gaffer.overlap"),
        ({"tz": "UTC", "task": "t.unknown"}, "task"),
    ],
)
def test_a_bad_update_names_the_field_and_writes_nothing(
    store: ScheduleStore, changes: dict[str, Any], field: str
) -> None:
    before = store.add("s", "t.noop", cron("30 2 * * *"))
    with pytest.raises(GafferError) as info:
        store.update("s", **changes)
    assert field in str(info.value)
    assert store.get("s") == before


def test_update_of_an_every_schedule_refuses_a_zone(store: ScheduleStore) -> None:
    store.add("s", "t.noop", every(60))
    with pytest.raises(InvalidInput, match="schedule 's' is an every schedule"):
        store.update("s", tz="Europe/London")
    assert store.get("s").schedule == every(60)


def test_update_changes_a_config_schedule_until_beat_syncs_the_config_again(
    app: Celery, clock: FrozenClock
) -> None:
    config = {"from-config": {"task": "t.noop", "schedule": every(60)}}
    ScheduleStore(app, clock=clock, source="config").sync_config(config)
    ScheduleStore(app, clock=clock).update("from-config", every=30)
    assert ScheduleStore(app).get("from-config").schedule == every(30)
    ScheduleStore(app, clock=clock, source="config").sync_config(config)  # Beat starts
    assert ScheduleStore(app).get("from-config").schedule == every(60)


def test_add_many_stores_exactly_what_add_stores(store: ScheduleStore, clock: FrozenClock) -> None:
    from dataclasses import replace

    from celery_gaffer import at

    kinds = [
        (cron("30 2 * * 1-5", "Europe/Paris", jitter=5), {"grace": 60, "max_runs": 3}),
        (every(90), {"catchup": "all", "starting_deadline": 30, "enabled": False}),
        (
            at(clock() + timedelta(days=2)),
            {"ping_url": "https://hc-ping.com/x", "start_at": clock(), "end_at": clock()},
        ),
    ]
    for i, (schedule, policy) in enumerate(kinds):
        arguments: dict[str, Any] = {
            "args": [1, "ü"],
            "kwargs": {"tenant": i, "tags": ["a", None]},
            "options": {"queue": "q", "headers": {"h": "v"}},
            "gaffer": policy,
        }
        store.add(f"one-{i}", "t.noop", schedule, **arguments)
        store.add_many([{"name": f"many-{i}", "task": "t.noop", "schedule": schedule, **arguments}])
        one, many = store.get(f"one-{i}"), store.get(f"many-{i}")
        assert replace(many, name=one.name) == one
