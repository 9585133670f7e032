"""Webhook alerts go out from a thread of Beat's own: a slow receiver never holds the tick,
a redirect is a failed delivery logged once, and closing Beat does not wait for a POST.

Beat runs in-process against real SQLite / PostgreSQL and Redis; the receivers are real
HTTP servers on 127.0.0.1 (:mod:`tests.receivers`).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from celery import Celery

from celery_gaffer import Scheduler, ScheduleStore, every
from celery_gaffer.beat.alerts import retry_delay
from celery_gaffer.store import database_for
from celery_gaffer.store.alerts import alert_rows

from ...receivers import Answer, RawReceiver, redirect, slow, status
from ...support import FrozenClock


@pytest.fixture
def clock() -> FrozenClock:
    # A day ahead of the database's clock, as in test_alert_webhook.
    start = datetime.now(timezone.utc).replace(microsecond=0) + timedelta(days=1)
    return FrozenClock(now=start.replace(second=0))


@pytest.fixture
def receivers() -> Iterator[Callable[[Answer], RawReceiver]]:
    made: list[RawReceiver] = []

    def make(answer: Answer) -> RawReceiver:
        made.append(RawReceiver(answer))
        return made[-1]

    yield make
    for receiver in made:
        receiver.stop()


def _app(database_url: str, redis_url: str, webhook: str) -> Celery:
    app = Celery("alert-thread-test", broker=redis_url, set_as_current=False)
    app.conf.gaffer_database_url = database_url
    app.conf.gaffer_alert_webhook_url = webhook
    app.task(name="t.noop", shared=False)(_noop)
    return app


def _noop() -> None:
    return None


def _outbox(app: Celery) -> list[dict[str, Any]]:
    database = database_for(app)
    with database.read() as conn:
        return alert_rows(conn, database.models)


def _late(app: Celery, clock: FrozenClock, beat: Scheduler, names: int = 1) -> None:
    """Schedules ``s0``.. (every minute, grace 10 s) whose first fire turns late."""
    store = ScheduleStore(app, clock=clock)
    for index in range(names):
        store.add(f"s{index}", "t.noop", every(60), gaffer={"grace": 10})
    clock.advance(60)
    beat.tick()
    clock.advance(11)


def _wait_for(done: Callable[[], bool], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_a_slow_receiver_never_holds_the_tick_and_close_does_not_wait_for_it(
    database_url: str, redis_url: str, clock: FrozenClock, receivers: Any
) -> None:
    receiver = receivers(slow(2.0))
    app = _app(database_url, redis_url, receiver.url("/in", user="hook:s3cret@"))
    beat = Scheduler(app, clock=clock, sender_thread=True)
    try:
        _late(app, clock, beat, names=3)
        started = time.monotonic()
        beat.tick()  # three schedules turn late: three alerts, each answered in 2 s
        assert time.monotonic() - started < 1.0
        assert len(_outbox(app)) == 3
        _wait_for(lambda: sum(r["sent_at"] is not None for r in _outbox(app)) == 3, 15)
        assert sorted(json.loads(r.body)["schedule"] for r in receiver.requests) == [
            "s0",
            "s1",
            "s2",
        ]
        # Another change while a POST is under way: close() does not wait for it.
        ScheduleStore(app, clock=clock).add("s9", "t.noop", every(60), gaffer={"grace": 10})
        clock.advance(60)
        beat.tick()
        clock.advance(11)
        beat.tick()
        _wait_for(lambda: len(receiver.requests) == 4, 5)
    finally:
        started = time.monotonic()
        beat.close()
        closed_in = time.monotonic() - started
    assert closed_in < 1.0
    assert beat._tick_state.alerts.thread is None


def test_a_redirect_is_not_followed_is_retried_and_is_logged_once(
    database_url: str,
    redis_url: str,
    clock: FrozenClock,
    receivers: Any,
    caplog: pytest.LogCaptureFixture,
) -> None:
    other = receivers(status(200))
    receiver = receivers(redirect(other.url("/elsewhere")))
    app = _app(database_url, redis_url, receiver.url("/in", user="hook:s3cret@"))
    beat = Scheduler(app, clock=clock)  # no thread: the tick sends, within its budget
    with caplog.at_level(logging.DEBUG, logger="celery_gaffer.alerts"):
        _late(app, clock, beat)
        beat.tick()
        clock.advance(retry_delay(1).total_seconds())
        beat.tick()
        clock.advance(retry_delay(2).total_seconds())
        beat.tick()
    beat.close()
    assert len(receiver.requests) == 3
    assert other.requests == []  # no request, and so no credential, went to the other origin
    [row] = _outbox(app)
    assert row["sent_at"] is None
    assert row["attempts"] == 3
    assert "302" in row["last_error"]
    assert "redirects are not followed" in row["last_error"]
    failed = [r for r in caplog.records if getattr(r, "action", "") == "alert_failed"]
    assert [r.levelname for r in failed] == ["WARNING", "DEBUG", "DEBUG"]
    assert "s3cret" not in caplog.text
    assert "/in" not in failed[0].getMessage()
