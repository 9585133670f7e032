"""Push alerts: Beat POSTs each health change to a real local HTTP receiver, once.

Beat runs in-process with a frozen clock (set a day ahead of the database's clock, so a
finished run's re-check is due) against real SQLite / PostgreSQL and Redis.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from celery import Celery

from celery_gaffer import Scheduler, ScheduleStore, every
from celery_gaffer.beat.alerts import retry_delay
from celery_gaffer.beat.health import all_health
from celery_gaffer.protocol import RunState
from celery_gaffer.store import database_for
from celery_gaffer.store import schedules as schedule_rows
from celery_gaffer.store.alerts import alert_rows
from celery_gaffer.store.retention import cleanup

from ...support import FrozenClock

BODY_KEYS = {
    "alert_id",
    "schedule",
    "state",
    "previous",
    "reason",
    "at",
    "due_nominal_at",
    "consecutive_failures",
}


class Receiver:
    """A real HTTP server on 127.0.0.1 that records each POST and can answer 500."""

    def __init__(self, port: int = 0) -> None:
        self.requests: list[dict[str, Any]] = []
        self.fail_next = 0
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers["Content-Length"]))
                failed = receiver.fail_next > 0
                receiver.fail_next -= int(failed)
                receiver.requests.append(
                    {
                        "path": self.path,
                        "raw": raw.decode(),
                        "body": json.loads(raw),
                        "authorization": self.headers.get("Authorization"),
                        "status": 500 if failed else 204,
                    }
                )
                self.send_response(500 if failed else 204)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                return None

        self.server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def url(self) -> str:
        return f"http://hook:s3cret-pw@127.0.0.1:{self.port}/alerts?token=tok-secret"

    @property
    def delivered(self) -> list[dict[str, Any]]:
        return [r["body"] for r in self.requests if r["status"] < 300]

    def stop(self) -> None:
        if not self.thread.is_alive():
            return
        self.server.shutdown()
        self.server.server_close()
        self.thread.join()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    running = Receiver()
    yield running
    running.stop()


@pytest.fixture
def app(database_url: str, redis_url: str, receiver: Receiver) -> Iterator[Celery]:
    app = Celery("alert-test", broker=redis_url, set_as_current=False)
    app.conf.gaffer_database_url = database_url
    app.conf.gaffer_alert_webhook_url = receiver.url()

    @app.task(name="t.noop", shared=False)
    def noop() -> None:
        return None

    yield app
    app.close()


@pytest.fixture
def clock() -> FrozenClock:
    # A day ahead of the database's clock: a finished run asks for a re-check at the
    # database's now, which is then already due.
    start = datetime.now(timezone.utc).replace(microsecond=0) + timedelta(days=1)
    return FrozenClock(now=start.replace(second=0))


def succeed(app: Celery, name: str, nominal: datetime) -> None:
    """What the run recorder writes when a fire of ``name`` succeeds."""
    database = database_for(app)
    with database.begin() as conn:
        schedule_rows.update_schedule_facts(
            conn, database.models, name, RunState.SUCCEEDED, nominal
        )


def outbox(app: Celery) -> list[dict[str, Any]]:
    database = database_for(app)
    with database.read() as conn:
        return alert_rows(conn, database.models)


def late_schedule(app: Celery, clock: FrozenClock, *beats: Scheduler) -> datetime:
    """Add ``s`` (every minute, grace 10 s), send its first fire; its nominal time."""
    ScheduleStore(app, clock=clock).add("s", "t.noop", every(60), gaffer={"grace": 10})
    nominal = clock.advance(60)
    for beat in beats:
        beat.tick()
    clock.advance(11)
    return nominal


def test_each_change_is_posted_once_with_two_beats_and_no_secret(
    app: Celery, clock: FrozenClock, receiver: Receiver
) -> None:
    first, second = Scheduler(app, clock=clock), Scheduler(app, clock=clock)
    nominal = late_schedule(app, clock, first, second)
    for beat in (first, second, first, second):
        beat.tick()
    assert [(a["state"], a["previous"]) for a in receiver.delivered] == [("late", "ok")]

    succeed(app, "s", nominal)
    clock.advance(1)
    for beat in (second, first, second, first):
        beat.tick()
    assert [(a["state"], a["previous"]) for a in receiver.delivered] == [
        ("late", "ok"),
        ("ok", "late"),
    ]
    late, recovered = receiver.delivered
    assert set(late) == set(recovered) == BODY_KEYS
    assert late["schedule"] == "s"
    assert late["due_nominal_at"] == nominal.strftime("%Y-%m-%dT%H:%M:%SZ")
    assert late["reason"].startswith("fire of ")
    assert late["alert_id"] != recovered["alert_id"]
    # The URL's user-info went as Basic authentication; no secret is in any body.
    assert all(r["authorization"] == "Basic aG9vazpzM2NyZXQtcHc=" for r in receiver.requests)
    for request in receiver.requests:
        assert "s3cret" not in request["raw"]
        assert "tok-secret" not in request["raw"]
        assert str(app.conf.gaffer_database_url) not in request["raw"]
    assert [row["sent_at"] is not None for row in outbox(app)] == [True, True]


def test_a_failed_post_is_retried_after_its_backoff_and_arrives_once(
    app: Celery, clock: FrozenClock, receiver: Receiver, caplog: pytest.LogCaptureFixture
) -> None:
    receiver.fail_next = 1
    beat = Scheduler(app, clock=clock)
    late_schedule(app, clock, beat)
    beat.tick()
    assert [r["status"] for r in receiver.requests] == [500]
    [row] = outbox(app)
    assert (row["attempts"], row["sent_at"]) == (1, None)
    assert "500" in row["last_error"]
    assert "not delivered" in caplog.text
    assert "s3cret" not in caplog.text

    clock.advance(retry_delay(1).total_seconds() - 1)
    beat.tick()
    assert len(receiver.requests) == 1  # still backing off
    clock.advance(1)
    beat.tick()
    beat.tick()
    assert [r["status"] for r in receiver.requests] == [500, 204]
    assert receiver.requests[0]["body"] == receiver.requests[1]["body"]
    [row] = outbox(app)
    assert (row["attempts"], row["next_attempt_at"]) == (2, None)
    assert row["sent_at"] is not None


def test_an_alert_a_beat_could_not_send_is_sent_by_the_next_beat(
    app: Celery, clock: FrozenClock, receiver: Receiver
) -> None:
    receiver.stop()  # nothing listens: the connection is refused
    beat = Scheduler(app, clock=clock)
    late_schedule(app, clock, beat)
    beat.tick()
    [row] = outbox(app)
    assert row["sent_at"] is None
    assert row["attempts"] == 1
    del beat  # this Beat stops; a new one starts with the receiver back

    back = Receiver(receiver.port)
    try:
        clock.advance(retry_delay(1).total_seconds())
        Scheduler(app, clock=clock).tick()
        assert [(a["state"], a["alert_id"]) for a in back.delivered] == [
            ("late", row["body"]["alert_id"])
        ]
    finally:
        back.stop()


def test_a_paused_schedule_is_never_alerted(
    app: Celery, clock: FrozenClock, receiver: Receiver
) -> None:
    store = ScheduleStore(app, clock=clock)
    beat = Scheduler(app, clock=clock)
    nominal = late_schedule(app, clock, beat)
    beat.tick()
    assert [a["state"] for a in receiver.delivered] == ["late"]
    store.pause("s")
    store.add("quiet", "t.noop", every(60), gaffer={"grace": 10})
    store.pause("quiet")
    for _ in range(3):
        clock.advance(60)
        beat.tick()
    succeed(app, "s", nominal)  # its pending run ends while it is paused
    clock.advance(1)
    beat.tick()
    assert [a["state"] for a in receiver.delivered] == ["late"]
    assert [row["schedule"] for row in outbox(app)] == ["s"]


def test_no_alert_is_written_without_the_setting(
    database_url: str, redis_url: str, clock: FrozenClock
) -> None:
    app = Celery("no-hook", broker=redis_url, set_as_current=False)
    app.conf.gaffer_database_url = database_url

    @app.task(name="t.noop", shared=False)
    def noop() -> None:
        return None

    beat = Scheduler(app, clock=clock)
    late_schedule(app, clock, beat)
    beat.tick()
    assert [h.state for h in _health(app, clock)] == ["late"]
    assert outbox(app) == []
    app.close()


def _health(app: Celery, clock: FrozenClock) -> list[Any]:
    database = database_for(app)
    with database.read() as conn:
        return all_health(conn, database.models, clock.now, database.settings)


def test_cleanup_deletes_sent_alerts_past_the_ledger_retention(
    app: Celery, clock: FrozenClock, receiver: Receiver
) -> None:
    beat = Scheduler(app, clock=clock)
    late_schedule(app, clock, beat)
    beat.tick()
    assert len(outbox(app)) == 1
    database = database_for(app)
    assert cleanup(database, clock.now + timedelta(days=29)).alerts == 0
    assert cleanup(database, clock.now + timedelta(days=31)).alerts == 1
    assert outbox(app) == []


def test_an_error_and_its_end_are_each_posted_once(
    app: Celery, clock: FrozenClock, receiver: Receiver
) -> None:
    ScheduleStore(app, clock=clock).add("e", "t.noop", every(60), gaffer={"grace": 10})
    task = app.tasks.pop("t.noop")  # this Beat's app lost the task: the row is unusable
    first, second = Scheduler(app, clock=clock), Scheduler(app, clock=clock)
    clock.advance(60)
    for beat in (first, second, first, second):
        beat.tick()
    assert [(a["state"], a["previous"]) for a in receiver.delivered] == [("error", "ok")]
    assert "not registered" in receiver.delivered[0]["reason"]

    app.tasks["t.noop"] = task  # fixed: usable again on the next recheck
    clock.advance(61)
    for beat in (second, first, second, first):
        beat.tick()
    assert [(a["state"], a["previous"]) for a in receiver.delivered] == [
        ("error", "ok"),
        ("ok", "error"),
    ]


def test_an_alert_nobody_receives_for_a_day_is_given_up_with_one_error(
    app: Celery, clock: FrozenClock, receiver: Receiver, caplog: pytest.LogCaptureFixture
) -> None:
    receiver.fail_next = 10_000
    beat = Scheduler(app, clock=clock)
    late_schedule(app, clock, beat)
    beat.tick()
    clock.advance(23 * 3600)
    beat.tick()
    [row] = outbox(app)
    assert row["next_attempt_at"] is not None  # still retried
    clock.advance(3600)
    beat.tick()
    clock.advance(3600)
    beat.tick()
    [row] = outbox(app)
    assert (row["next_attempt_at"], row["sent_at"], row["attempts"]) == (None, None, 3)
    given_up = [r for r in caplog.records if getattr(r, "action", "") == "alert_given_up"]
    assert len(given_up) == 1
    assert given_up[0].levelname == "ERROR"
    assert "s3cret" not in given_up[0].getMessage()
    assert cleanup(database_for(app), clock.now + timedelta(days=31)).alerts == 1
