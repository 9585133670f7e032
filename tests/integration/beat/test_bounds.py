"""One-off and bounded schedules through real ticks: ``at``, ``start_at``, ``end_at``,
``max_runs``.

Real SQLite and PostgreSQL, real Redis; Beat in-process with an injected clock. Two
schedulers stand for two Beats sharing the database.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest
from celery import Celery
from sqlalchemy import select

from celery_gaffer import InvalidInput, InvalidSchedule, Scheduler, ScheduleStore, at, cron, every
from celery_gaffer.beat.health import all_health
from celery_gaffer.store import database_for

from ...support import FrozenClock, gaffer_cli, message_headers, noop_app

UTC = timezone.utc


@pytest.fixture
def app(database_url: str, redis_url: str) -> Iterator[Celery]:
    with noop_app("bounds-test", database_url, redis_url) as app:
        yield app


def nominal_times(redis_url: str, name: str) -> list[str]:
    return [
        h["gaffer_nominal_at"] for h in message_headers(redis_url) if h["gaffer_schedule"] == name
    ]


def tick_both(beats: list[Scheduler], clock: FrozenClock, seconds: float, times: int) -> None:
    for _ in range(times):
        clock.advance(seconds)
        for beat in beats:
            beat.tick()


def test_an_at_schedule_fires_once_with_two_beats_and_is_then_done(
    app: Celery, clock: FrozenClock, redis_url: str
) -> None:
    store = ScheduleStore(app, clock=clock)
    when = clock() + timedelta(minutes=5)
    paris = ZoneInfo("Europe/Paris")
    added = store.add("once", "t.noop", at(when.astimezone(paris)))
    assert added.next_fire_at == when
    beats = [Scheduler(app, clock=clock), Scheduler(app, clock=clock)]
    tick_both(beats, clock, 60, 12)
    assert nominal_times(redis_url, "once") == [when.strftime("%Y-%m-%dT%H:%M:%SZ")]
    done = store.get("once")
    assert done.next_fire_at is None
    assert done.finished
    assert done.fired_count == 1
    database = database_for(app)
    with database.read() as conn:
        found = all_health(conn, database.models, clock(), database.settings)
    health = {h.schedule: h for h in found}
    assert health["once"].state == "late"  # its one run never ran (no worker here)...
    assert health["once"].due_nominal_at == when  # ...and it is the only one expected
    result = gaffer_cli(app, "schedules")
    line = next(line for line in result.output.splitlines() if line.startswith("once"))
    assert " done " in line
    assert "Europe/Paris" in line


def test_an_at_schedule_added_after_its_time_fires_once_at_once_unless_past_its_deadline(
    app: Celery, clock: FrozenClock, redis_url: str
) -> None:
    store = ScheduleStore(app, clock=clock)
    store.add("late-one", "t.noop", at(clock() - timedelta(minutes=10)))
    store.add(
        "too-late", "t.noop", at(clock() - timedelta(minutes=10)), gaffer={"starting_deadline": 60}
    )
    beat = Scheduler(app, clock=clock)
    tick_both([beat], clock, 5, 3)
    assert len(nominal_times(redis_url, "late-one")) == 1
    assert nominal_times(redis_url, "too-late") == []  # recorded as missed instead
    assert store.get("too-late").fired_count == 0  # a missed fire is not a run
    assert store.get("late-one").finished
    assert store.get("too-late").finished


def test_max_runs_stops_an_every_schedule_after_that_many_fires(
    app: Celery, clock: FrozenClock, redis_url: str
) -> None:
    store = ScheduleStore(app, clock=clock)
    store.add("thrice", "t.noop", every(60), gaffer={"max_runs": 3})
    beats = [Scheduler(app, clock=clock), Scheduler(app, clock=clock)]
    tick_both(beats, clock, 60, 8)
    assert len(nominal_times(redis_url, "thrice")) == 3
    stored = store.get("thrice")
    assert stored.fired_count == 3
    assert stored.next_fire_at is None
    assert stored.finished
    # Raising the limit lets it go on from now (the count is kept through the edit).
    store.update("thrice", gaffer={"max_runs": 4})
    assert store.get("thrice").next_fire_at is not None
    tick_both(beats, clock, 60, 4)
    assert len(nominal_times(redis_url, "thrice")) == 4
    assert store.get("thrice").fired_count == 4


def test_max_runs_with_catchup_all_sends_the_oldest_fires_only(
    app: Celery, clock: FrozenClock, redis_url: str
) -> None:
    store = ScheduleStore(app, clock=clock)
    store.add("backlog", "t.noop", every(60), gaffer={"max_runs": 2, "catchup": "all"})
    beat = Scheduler(app, clock=clock)
    clock.advance(600)  # Beat was down for ten fires
    beat.tick()
    start = clock() - timedelta(seconds=600)
    expected = [(start + timedelta(seconds=60 * k)).strftime("%Y-%m-%dT%H:%M:%SZ") for k in (1, 2)]
    assert nominal_times(redis_url, "backlog") == expected
    tick_both([beat], clock, 60, 3)
    assert len(nominal_times(redis_url, "backlog")) == 2


def test_start_at_and_end_at_bound_a_cron_schedule_inclusively(
    app: Celery, clock: FrozenClock, redis_url: str
) -> None:
    store = ScheduleStore(app, clock=clock)
    first = clock() + timedelta(minutes=3)  # 12:03, a fire of */1 (inclusive start)
    last = clock() + timedelta(minutes=6)  # 12:06, inclusive end
    store.add(
        "window",
        "t.noop",
        cron("* * * * *"),
        gaffer={"start_at": first, "end_at": last.isoformat()},
    )
    assert store.get("window").next_fire_at == first
    tick_both([Scheduler(app, clock=clock)], clock, 60, 10)
    assert nominal_times(redis_url, "window") == [
        (first + timedelta(minutes=k)).strftime("%Y-%m-%dT%H:%M:%SZ") for k in range(4)
    ]
    assert store.get("window").finished


def test_bad_bounds_name_their_field_and_write_nothing(app: Celery, clock: FrozenClock) -> None:
    store = ScheduleStore(app, clock=clock)
    cases = [
        ({"max_runs": 0}, "gaffer.max_runs"),
        ({"max_runs": True}, "gaffer.max_runs"),
        ({"start_at": datetime(2026, 1, 1)}, "gaffer.start_at"),  # naive
        ({"end_at": "next tuesday"}, "gaffer.end_at"),
        ({"start_at": "2026-02-01T00:00Z", "end_at": "2026-01-01T00:00Z"}, "gaffer.end_at"),
    ]
    for policy, field in cases:
        with pytest.raises(InvalidInput) as caught:
            store.add("bad", "t.noop", every(60), gaffer=policy)
        assert caught.value.field == field, policy
    with pytest.raises(InvalidSchedule) as naive:
        at(datetime(2026, 1, 1))
    assert naive.value.field == "when"
    assert store.list() == []


def test_the_cli_adds_a_one_off_and_bounds_and_shows_them(app: Celery) -> None:
    result = gaffer_cli(
        app, "add", "xmas", "t.noop", "--at", "2036-12-24T09:00+01:00", "--tz", "Europe/Paris"
    )
    assert result.exit_code == 0, result.output + result.stderr
    assert "at 2036-12-24T09:00:00+01:00 Europe/Paris" in result.output
    result = gaffer_cli(
        app, "add", "campaign", "t.noop", "--every", "3600", "--max-runs", "5",
        "--start-at", "2036-01-01T00:00Z", "--end-at", "2036-02-01T00:00Z",
    )  # fmt: skip
    assert result.exit_code == 0, result.output + result.stderr
    result = gaffer_cli(app, "schedules", "--json")
    rows = {row["name"]: row for row in map(json.loads, result.output.splitlines())}
    assert rows["campaign"]["max_runs"] == 5
    assert rows["campaign"]["start_at"] == "2036-01-01T00:00:00+00:00"
    assert rows["campaign"]["next_fire_at"] == "2036-01-01T00:00:00+00:00"
    assert rows["campaign"]["done"] is False
    assert rows["xmas"]["schedule"] == {
        "kind": "at",
        "when": "2036-12-24T08:00:00+00:00",
        "tz": "Europe/Paris",
    }
    result = gaffer_cli(
        app, "update", "campaign", "--max-runs", "7", "--end-at", "2036-03-01T00:00Z"
    )
    assert result.exit_code == 0, result.output + result.stderr
    bounds = ScheduleStore(app).get("campaign").policy.bounds
    assert bounds.max_runs == 7
    assert bounds.end_at == datetime(2036, 3, 1, tzinfo=UTC)
    bad = gaffer_cli(app, "add", "x", "t.noop", "--at", "2036-12-24T09:00")
    assert bad.exit_code == 2
    assert len(bad.stderr.strip().splitlines()) == 1
    assert "--at" in bad.stderr


def test_the_fire_count_is_stored_with_the_tick_that_sends(app: Celery, clock: FrozenClock) -> None:
    store = ScheduleStore(app, clock=clock)
    store.add("counted", "t.noop", every(60))
    tick_both([Scheduler(app, clock=clock)], clock, 60, 3)
    database = database_for(app)
    table = database.models.Schedule.__table__  # type: ignore[attr-defined]
    with database.read() as conn:
        count = conn.execute(select(table.c.fired_count).where(table.c.name == "counted")).scalar()
    assert count == 3
    assert store.get("counted").fired_count == 3


def test_loosening_the_bounds_of_a_done_schedule_starts_it_again_from_now(
    app: Celery, clock: FrozenClock, redis_url: str
) -> None:
    store = ScheduleStore(app, clock=clock)
    end = clock() + timedelta(minutes=5)
    store.add("ends", "t.noop", every(60), gaffer={"catchup": "all", "end_at": end})
    store.add("capped", "t.noop", every(60), gaffer={"catchup": "all", "max_runs": 2})
    beat = Scheduler(app, clock=clock)
    tick_both([beat], clock, 60, 10)
    assert len(nominal_times(redis_url, "ends")) == 5
    assert len(nominal_times(redis_url, "capped")) == 2
    clock.advance(86400)  # a day later both get room again
    store.update("ends", gaffer={"end_at": end + timedelta(days=7)})
    store.update("capped", gaffer={"max_runs": 3})
    tick_both([beat], clock, 60, 3)
    # Nothing of the day they were done: only fires after the edit.
    assert len(nominal_times(redis_url, "ends")) == 5 + 3
    assert len(nominal_times(redis_url, "capped")) == 3
    assert min(nominal_times(redis_url, "ends")[5:]) > clock().strftime("%Y-%m-%dT00:00")


def test_an_at_given_a_past_time_by_update_or_replace_fires_once_at_once(
    app: Celery, clock: FrozenClock, redis_url: str
) -> None:
    store = ScheduleStore(app, clock=clock)
    store.add("moved", "t.noop", at(clock() + timedelta(days=1)))
    store.add("replaced", "t.noop", at(clock() + timedelta(days=1)))
    past = clock() - timedelta(minutes=3)
    store.update("moved", schedule=at(past))
    store.add("replaced", "t.noop", at(past - timedelta(minutes=1)), replace=True)
    tick_both([Scheduler(app, clock=clock)], clock, 5, 3)
    assert nominal_times(redis_url, "moved") == [past.strftime("%Y-%m-%dT%H:%M:%SZ")]
    assert len(nominal_times(redis_url, "replaced")) == 1


def test_replacing_a_paused_schedule_with_an_enabled_one_sends_nothing_of_the_pause(
    app: Celery, clock: FrozenClock, redis_url: str
) -> None:
    store = ScheduleStore(app, clock=clock)
    store.add("held", "t.noop", every(60), gaffer={"catchup": "all"})
    store.pause("held")
    clock.advance(86400)
    store.add("held", "t.noop", every(60), gaffer={"catchup": "all"}, replace=True)
    tick_both([Scheduler(app, clock=clock)], clock, 60, 2)
    assert len(nominal_times(redis_url, "held")) == 2


def test_a_fire_already_in_the_ledger_does_not_count_toward_max_runs(
    app: Celery, clock: FrozenClock, redis_url: str
) -> None:
    store = ScheduleStore(app, clock=clock)
    store.add("backfilled", "t.noop", every(60), gaffer={"max_runs": 2})
    beat = Scheduler(app, clock=clock)
    clock.advance(60)
    # The first fire sent by hand before Beat's tick reaches it: the tick adds nothing.
    store.backfill("backfilled", clock() - timedelta(seconds=1), clock())
    beat.tick()
    assert store.get("backfilled").fired_count == 0
    tick_both([beat], clock, 60, 4)
    stored = store.get("backfilled")
    assert stored.fired_count == 2
    assert len(nominal_times(redis_url, "backfilled")) == 3  # the backfill's, then two


@pytest.mark.parametrize("max_runs", [1, 2])
def test_a_last_allowed_fire_already_in_the_ledger_leaves_the_schedule_firing_until_done(
    app: Celery, clock: FrozenClock, redis_url: str, max_runs: int
) -> None:
    store = ScheduleStore(app, clock=clock)
    store.add("capped", "t.noop", every(60), gaffer={"max_runs": max_runs, "catchup": "all"})
    beat = Scheduler(app, clock=clock)
    tick_both([beat], clock, 60, max_runs - 1)
    clock.advance(60)
    # The fire that would be the last run is sent by hand first: the tick adds nothing,
    # and the schedule must not end with a run left (nor stay stuck without a next fire).
    store.backfill("capped", clock() - timedelta(seconds=1), clock())
    beat.tick()
    assert store.get("capped").next_fire_at is not None
    tick_both([beat], clock, 60, 10)
    done = store.get("capped")
    assert done.fired_count == max_runs
    assert done.finished
    assert len(nominal_times(redis_url, "capped")) == max_runs + 1  # the backfill's too
