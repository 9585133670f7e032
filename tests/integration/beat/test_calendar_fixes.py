"""Business calendars through Beat and the store: DST, stored calendar edits, backfill."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timezone

import pytest
from celery import Celery

from celery_gaffer import Scheduler, ScheduleStore, cron

from ...support import FrozenClock, noop_app
from .test_calendars import ledger, run_until, sent

UTC = timezone.utc


@pytest.fixture
def app(database_url: str, redis_url: str) -> Iterator[Celery]:
    with noop_app("calendar-fixes-test", database_url, redis_url) as app:
        yield app


def test_a_fire_moved_off_a_spring_forward_sunday_is_sent_once_at_mondays_own_time(
    app: Celery, clock: FrozenClock, redis_url: str
) -> None:
    clock.now = datetime(2026, 3, 6, 0, tzinfo=UTC)
    store = ScheduleStore(app, clock=clock)
    store.add(
        "ny", "t.noop", cron("30 2 * * *", "America/New_York"),
        gaffer={"skip_on": ["weekends"], "on_skip": "next_day"},
    )  # fmt: skip
    beat = Scheduler(app, clock=clock)
    run_until(beat, clock, datetime(2026, 3, 10, 12, tzinfo=UTC), step=600)
    # 02:30 EST on Friday, 02:30 EDT on Monday and Tuesday: Sunday's fire (03:00 EDT,
    # 02:30 is in the gap) and Saturday's are Monday's 02:30 fire.
    assert sent(redis_url, "ny") == [
        "2026-03-06T07:30:00Z", "2026-03-09T06:30:00Z", "2026-03-10T06:30:00Z"
    ]  # fmt: skip
    assert [state for _, state, _ in ledger(app, "ny")] == ["sent"] * 3


def test_a_date_added_to_a_stored_calendar_moves_the_next_fire_at_once(
    app: Celery, clock: FrozenClock, redis_url: str
) -> None:
    clock.now = datetime(2026, 12, 1, 8, tzinfo=UTC)
    store = ScheduleStore(app, clock=clock)
    store.add_calendar("freeze", ["2026-01-01"])
    store.add(
        "thu", "t.noop", cron("0 9 * * 4", "Europe/London"),
        gaffer={"skip_on": ["freeze"], "on_skip": "previous_day", "catchup": "skip"},
    )  # fmt: skip
    assert store.get("thu").next_fire_at == datetime(2026, 12, 3, 9, tzinfo=UTC)
    store.add_calendar("freeze", ["2026-12-03"])  # Thursday: moved to Wednesday 09:00
    assert store.get("thu").next_fire_at == datetime(2026, 12, 2, 9, tzinfo=UTC)
    beat = Scheduler(app, clock=clock)
    run_until(beat, clock, datetime(2026, 12, 2, 9, 5, tzinfo=UTC), step=300)
    # Sent on Wednesday at 09:00: not held back to Thursday's stored next fire (health
    # then called the Wednesday fire late while Beat had not sent it).
    assert sent(redis_url, "thu") == ["2026-12-02T09:00:00Z"]
    run_until(beat, clock, datetime(2026, 12, 4, 12, tzinfo=UTC), step=300)
    assert sent(redis_url, "thu") == ["2026-12-02T09:00:00Z"]
    # Taking the date out again puts the next fire back on its Thursday.
    store.add_calendar("freeze", ["2026-12-10"])
    assert store.get("thu").next_fire_at == datetime(2026, 12, 9, 9, tzinfo=UTC)
    store.remove_calendar("freeze", ["2026-12-10"])
    assert store.get("thu").next_fire_at == datetime(2026, 12, 10, 9, tzinfo=UTC)


def test_resume_and_beat_schedule_entries_apply_stored_calendars(
    app: Celery, clock: FrozenClock
) -> None:
    clock.now = datetime(2026, 12, 1, 8, tzinfo=UTC)
    store = ScheduleStore(app, clock=clock)
    store.add_calendar("freeze", ["2026-12-03"])
    gaffer = {"skip_on": ["freeze"], "on_skip": "next_day"}
    store.add("thu", "t.noop", cron("0 9 * * 4", "Europe/London"), gaffer=gaffer)
    store.pause("thu")
    store.resume("thu")
    assert store.get("thu").next_fire_at == datetime(2026, 12, 4, 9, tzinfo=UTC)
    config = {"cfg": {"task": "t.noop", "schedule": cron("0 9 * * 4", "Europe/London"),
                      "gaffer": gaffer}}  # fmt: skip
    ScheduleStore(app, clock=clock, source="config").sync_config(config)
    assert store.get("cfg").next_fire_at == datetime(2026, 12, 4, 9, tzinfo=UTC)
    # A stored calendar that does not exist puts the entry in error, not the sync.
    config["cfg"]["gaffer"] = {"skip_on": ["nope"]}
    ScheduleStore(app, clock=clock, source="config").sync_config(config)
    assert "nope" in str(store.get("cfg").error)


def test_a_backfill_skips_calendar_dates_and_sends_moved_fires_at_their_moved_time(
    app: Celery, clock: FrozenClock, redis_url: str
) -> None:
    clock.now = datetime(2026, 12, 24, 8, tzinfo=UTC)
    store = ScheduleStore(app, clock=clock)
    store.add_calendar("freeze", ["2026-12-24"])
    store.add(
        "wd", "t.noop", cron("0 9 * * *", "Europe/London"),
        gaffer={"skip_on": ["weekends", "holidays:GB"], "on_skip": "next_day"},
    )  # fmt: skip
    store.add(
        "frozen", "t.noop", cron("0 9 * * *", "Europe/London"),
        gaffer={"skip_on": ["freeze"], "on_skip": "skip"},
    )  # fmt: skip
    beat = Scheduler(app, clock=clock)
    run_until(beat, clock, datetime(2026, 12, 30, 12, tzinfo=UTC))
    before = sent(redis_url, "wd")
    assert before == ["2026-12-24T09:00:00Z", "2026-12-29T09:00:00Z", "2026-12-30T09:00:00Z"]
    start, end = datetime(2026, 12, 23, 10, tzinfo=UTC), datetime(2026, 12, 30, 10, tzinfo=UTC)
    report = store.backfill("wd", start, end)
    assert (report.sent, report.already) == (0, 3)
    assert sent(redis_url, "wd") == before
    # A stored calendar's date is not backfilled either.
    store.backfill("frozen", start, end)
    assert "2026-12-24T09:00:00Z" not in sent(redis_url, "frozen")
