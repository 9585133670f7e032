"""Beat resumes a paused schedule once its ``paused_until`` has passed, looking at most
every few seconds of the injected clock; the resumed schedule fires from then on."""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterator
from datetime import datetime, timedelta

import pytest
from celery import Celery
from sqlalchemy import update

from celery_gaffer import Scheduler, ScheduleStore, every
from celery_gaffer.beat.resumes import RESUME_EVERY
from celery_gaffer.protocol import fire_key
from celery_gaffer.store import database_for

from ...support import FrozenClock, message_headers, noop_app


@pytest.fixture
def app(database_url: str, redis_url: str) -> Iterator[Celery]:
    with noop_app("pause-ends-test", database_url, redis_url) as app:
        yield app


def pause_until(app: Celery, clock: FrozenClock, name: str, until: datetime | None) -> None:
    """Pause ``name`` to resume at ``until`` (the time written to its row)."""
    ScheduleStore(app, clock=clock).pause(name)
    database = database_for(app)
    table = database.models.Schedule.__table__  # type: ignore[attr-defined]
    with database.begin() as conn:
        conn.execute(update(table).where(table.c.name == name).values(paused_until=until))


def sent(redis_url: str) -> Counter[str]:
    return Counter(h["gaffer_key"] for h in message_headers(redis_url))


def test_a_pause_whose_time_passed_is_resumed_and_the_schedule_fires_from_then(
    app: Celery, clock: FrozenClock, redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    store = ScheduleStore(app, clock=clock)
    store.add("nightly", "t.noop", every(60), gaffer={"catchup": "all"})
    store.add("held", "t.noop", every(60))
    pause_until(app, clock, "nightly", clock.now + timedelta(seconds=150))
    pause_until(app, clock, "held", None)  # paused with no end: stays paused
    scheduler = Scheduler(app, clock=clock)
    scheduler.tick()
    clock.advance(149)
    scheduler.tick()
    assert not store.get("nightly").policy.enabled
    assert sent(redis_url) == Counter()

    clock.advance(RESUME_EVERY)  # the pause ended 4 s ago; the next look is due
    with caplog.at_level(logging.INFO, logger="celery_gaffer.beat"):
        scheduler.tick()
    resumed_at = clock.now
    assert store.get("nightly").policy.enabled
    assert not store.get("held").policy.enabled
    [line] = [r for r in caplog.records if getattr(r, "action", None) == "pause_ended"]
    assert line.getMessage() == "resumed schedule nightly: its pause ended"
    # The fires of the pause are never sent, catchup "all" or not: as `resume` does.
    assert sent(redis_url) == Counter()
    clock.advance(60)
    scheduler.tick()
    [key] = sent(redis_url)
    nominal = datetime.fromisoformat(key.removeprefix("nightly@").replace("Z", "+00:00"))
    assert resumed_at < nominal <= clock.now
    scheduler.close()


def test_ended_pauses_are_looked_for_at_most_every_few_seconds(
    app: Celery, clock: FrozenClock
) -> None:
    store = ScheduleStore(app, clock=clock)
    store.add("s", "t.noop", every(60))
    scheduler = Scheduler(app, clock=clock)
    scheduler.tick()  # looks now (nothing paused)
    pause_until(app, clock, "s", clock.now + timedelta(seconds=1))
    clock.advance(RESUME_EVERY - 1)
    scheduler.tick()  # the pause has ended, but the last look was too recent
    assert not store.get("s").policy.enabled
    clock.advance(1)
    scheduler.tick()
    assert store.get("s").policy.enabled
    scheduler.close()


def test_a_paused_schedule_still_in_error_stays_paused_and_beat_goes_on(
    app: Celery, clock: FrozenClock, redis_url: str
) -> None:
    store = ScheduleStore(app, clock=clock, check_tasks=False)
    store.add("broken", "t.missing", every(60))
    store.add("fine", "t.noop", every(60))
    scheduler = Scheduler(app, clock=clock)
    clock.advance(60)
    scheduler.tick()  # "broken" goes to error: its task is not registered
    pause_until(app, clock, "broken", clock.now)
    clock.advance(60)
    scheduler.tick()
    assert not store.get("broken").policy.enabled
    assert store.get("broken").error is not None
    assert sent(redis_url)[fire_key("fine", clock.now)] == 1
    scheduler.close()
