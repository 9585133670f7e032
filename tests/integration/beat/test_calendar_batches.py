"""Business calendars at scale and at the edges: health reads stored calendars once per
batch, a schedule no fire of which survives its calendars is refused, emptying skip_on.
Real SQLite / PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from celery import Celery
from sqlalchemy import event

from celery_gaffer import ScheduleStore, cron
from celery_gaffer.beat.health import all_health, check_due_within
from celery_gaffer.beat.survey import states
from celery_gaffer.store import database_for

from ...support import FrozenClock, noop_app

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
