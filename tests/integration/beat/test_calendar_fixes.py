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
