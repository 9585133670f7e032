"""Business calendars at scale and at the edges: health reads stored calendars once per
batch, a schedule no fire of which survives its calendars is refused, emptying skip_on.
Real SQLite / PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import date, datetime, timedelta, timezone
from typing import Any

import pytest
from celery import Celery
from sqlalchemy import event, update

from celery_gaffer import InvalidInput, Scheduler, ScheduleStore, cron
from celery_gaffer.beat.health import all_health, check_due_within
from celery_gaffer.beat.survey import states
from celery_gaffer.store import database_for
from celery_gaffer.store.models import table_of

from ...support import FrozenClock, gaffer_cli, noop_app

UTC = timezone.utc


@pytest.fixture
def app(database_url: str, redis_url: str) -> Iterator[Celery]:
    with noop_app("calendar-batches-test", database_url, redis_url) as app:
        yield app


class CalendarReads:
    """Counts the statements reading the stored calendars while in its ``with`` block."""

    def __init__(self, app: Celery) -> None:
        self.engine = database_for(app).engine
        self.count = 0

    def seen(self, conn: Any, cursor: Any, statement: str, *rest: Any) -> None:
        if "calendar_days" in statement:
            self.count += 1

    def __enter__(self) -> CalendarReads:
        event.listen(self.engine, "before_cursor_execute", self.seen)
        return self

    def __exit__(self, *exc: object) -> None:
        event.remove(self.engine, "before_cursor_execute", self.seen)


def test_health_reads_the_stored_calendars_once_per_batch(app: Celery, clock: FrozenClock) -> None:
    clock.now = datetime(2026, 12, 1, 8, tzinfo=UTC)
    store = ScheduleStore(app, clock=clock)
    store.add_calendar("freeze", ["2026-12-24"])
    store.add_calendar("close", ["2026-12-31"])
    for n in range(12):
        skip_on = [["freeze"], ["close", "weekends"], ["weekends"]][n % 3]
        store.add(f"s{n}", "t.noop", cron(f"{n} 9 * * *"), gaffer={"skip_on": skip_on})
    database = database_for(app)
    later = clock.now + timedelta(days=2)  # every check is due
    with CalendarReads(app) as reads:
        checked = check_due_within(database, later, 60.0, 1000)
    assert len(checked) == 12
    assert reads.count == 1
    with CalendarReads(app) as reads, database.begin() as conn:
        healths = all_health(conn, database.models, later, database.settings)
    assert len(healths) == 12
    assert reads.count == 1
    with CalendarReads(app) as reads, database.begin() as conn:
        assert len(list(states(conn, database.models, later, database.settings))) == 12
    assert reads.count == 1


SATURDAYS = cron("0 9 * * 6", "Europe/London")
WEEKENDS = {"skip_on": ["weekends"], "on_skip": "skip"}


def test_a_schedule_whose_every_fire_is_on_its_calendars_is_refused_or_put_in_error(
    app: Celery, clock: FrozenClock
) -> None:
    clock.now = datetime(2026, 12, 1, 8, tzinfo=UTC)
    store = ScheduleStore(app, clock=clock)
    with pytest.raises(InvalidInput, match="no fire survives the calendars") as refused:
        store.add("sat", "t.noop", SATURDAYS, gaffer=WEEKENDS)
    assert refused.value.field == "gaffer.skip_on"
    with pytest.raises(InvalidInput, match="no fire survives") as paused:
        store.add("sat", "t.noop", SATURDAYS, gaffer={**WEEKENDS, "enabled": False})
    assert paused.value.field == "gaffer.skip_on"
    with pytest.raises(InvalidInput, match="no fire survives"):
        store.add_many([{"name": "sat", "task": "t.noop", "schedule": SATURDAYS,
                         "gaffer": WEEKENDS}])  # fmt: skip
    # Moved to Monday, the fires survive.
    store.add("sat", "t.noop", SATURDAYS, gaffer={**WEEKENDS, "on_skip": "next_day"})
    assert store.get("sat").next_fire_at == datetime(2026, 12, 7, 9, tzinfo=UTC)
    with pytest.raises(InvalidInput, match="no fire survives") as updated:
        store.update("sat", gaffer={"on_skip": "skip"})
    assert updated.value.field == "gaffer.skip_on"
    with pytest.raises(InvalidInput, match="no fire survives"):
        store.add("sat", "t.noop", SATURDAYS, gaffer=WEEKENDS, replace=True)
    # A stored calendar: its dates are known where the store resolves them.
    store.add_calendar("freeze", ["2026-12-02"])
    store.add("wed", "t.noop", cron("0 9 * * 3", "UTC"), gaffer={"skip_on": ["freeze"]})
    wednesdays = [f"{datetime(2026, 12, 9) + timedelta(weeks=n):%Y-%m-%d}" for n in range(60)]
    with pytest.raises(InvalidInput, match=r"schedule 'wed': gaffer\.skip_on: no fire") as day:
        store.add_calendar("freeze", wednesdays)
    assert day.value.field == "days"
    assert store.calendars()["freeze"] == [date(2026, 12, 2)]
    # Config: the entry is put in error, the sync goes on.
    config = {"cfg": {"task": "t.noop", "schedule": SATURDAYS, "gaffer": WEEKENDS},
              "ok": {"task": "t.noop", "schedule": SATURDAYS}}  # fmt: skip
    ScheduleStore(app, clock=clock, source="config").sync_config(config)
    assert "no fire survives" in str(store.get("cfg").error)
    assert store.get("cfg").enabled
    assert store.get("ok").next_fire_at == datetime(2026, 12, 5, 9, tzinfo=UTC)


def test_beat_puts_a_stored_row_no_fire_of_which_survives_in_error_at_once(
    app: Celery, clock: FrozenClock
) -> None:
    clock.now = datetime(2026, 12, 1, 8, tzinfo=UTC)
    store = ScheduleStore(app, clock=clock)
    store.add("sat", "t.noop", SATURDAYS, gaffer={**WEEKENDS, "on_skip": "next_day"})
    database = database_for(app)
    table = table_of(database.models.Schedule)
    with database.begin() as conn:  # written by hand, or by an older version
        conn.execute(update(table).where(table.c.name == "sat").values(on_skip="skip"))
    clock.advance(7 * 86400)
    Scheduler(app, clock=clock).tick()  # not a walk of 4,000 days: a year's
    assert "no fire survives" in str(store.get("sat").error)


def test_emptying_skip_on_clears_on_skip_through_the_store_and_the_cli(
    app: Celery, clock: FrozenClock
) -> None:
    clock.now = datetime(2026, 12, 1, 8, tzinfo=UTC)
    store = ScheduleStore(app, clock=clock)
    moved = {**WEEKENDS, "on_skip": "next_day"}
    store.add("sat", "t.noop", SATURDAYS, gaffer=moved)
    updated = store.update("sat", gaffer={"skip_on": []})
    assert (updated.policy.bounds.skip_on, updated.policy.bounds.on_skip) == (None, "skip")
    assert updated.next_fire_at == datetime(2026, 12, 5, 9, tzinfo=UTC)
    with pytest.raises(InvalidInput, match="needs skip_on calendars") as lone:
        store.update("sat", gaffer={"skip_on": [], "on_skip": "next_day"})
    assert lone.value.field == "gaffer.on_skip"
    store.update("sat", gaffer=moved)
    result = gaffer_cli(app, "update", "sat", "--no-skip-on")
    assert result.exit_code == 0, result.stderr
    assert "skip_on: weekends -> none" in result.stdout
    assert "on_skip: next_day -> skip" in result.stdout
    assert store.get("sat").policy.bounds.calendar is None
    both = gaffer_cli(app, "update", "sat", "--no-skip-on", "--on-skip", "next_day")
    assert both.exit_code == 2
    assert both.stderr.strip() == "error: give --no-skip-on without --skip-on and --on-skip"
