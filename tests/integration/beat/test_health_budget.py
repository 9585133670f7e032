"""Beat's health checks stay within a time budget per tick: batches of CHECK_BATCH rows,
none started once the budget has passed, the rest left due for the next tick. Real
SQLite / PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta, timezone

import pytest
from celery import Celery

from celery_gaffer import ScheduleStore, every
from celery_gaffer.beat.health import CHECK_BATCH, check_due_within
from celery_gaffer.store import database_for

from ...support import FrozenClock


def _noop() -> None:
    return None


@pytest.fixture
def app(database_url: str, redis_url: str) -> Iterator[Celery]:
    app = Celery("health-budget", broker=redis_url, set_as_current=False)
    app.conf.gaffer_database_url = database_url
    app.task(name="t.noop", shared=False)(_noop)
    yield app
    app.close()


def test_checks_past_the_budget_are_left_for_the_next_call(app: Celery) -> None:
    start = datetime.now(timezone.utc).replace(microsecond=0)
    clock = FrozenClock(now=start)
    count = 2 * CHECK_BATCH + 100
    ScheduleStore(app, clock=clock).add_many(
        {"name": f"s{i}", "task": "t.noop", "schedule": every(60)} for i in range(count)
    )
    database = database_for(app)
    later = start + timedelta(days=1)  # every schedule's check is due
    # No budget at all: one batch, then stop; the next call takes the next batch.
    assert len(check_due_within(database, later, 0.0, 1000)) == CHECK_BATCH
    assert len(check_due_within(database, later, 0.0, 1000)) == CHECK_BATCH
    assert len(check_due_within(database, later, 0.0, 1000)) == 100
    assert check_due_within(database, later, 0.0, 1000) == []
    # A budget long enough: every due check in one call, batch after batch.
    even_later = later + timedelta(days=1)
    checked = check_due_within(database, even_later, 60.0, 1000)
    assert len(checked) == count
    assert {health.schedule for health, _ in checked} == {f"s{i}" for i in range(count)}
