"""A running Beat's sender thread: held fires go out at their time while the tick does
other work, fires are decided ahead of their time and never sent before it, a Beat
that stops gives back what it still holds, and a Beat whose thread died sends them
itself (real databases, real Redis, the real clock: the claims are about timing, so the
bounds are generous)."""

from __future__ import annotations

import gc
import time
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from celery import Celery
from sqlalchemy import select

from celery_gaffer import Scheduler, ScheduleStore, every
from celery_gaffer.beat.held import MARK_EVERY, HeldSends
from celery_gaffer.beat.held_sender import Sender
from celery_gaffer.protocol import fire_key
from celery_gaffer.store import database_for

from ...support import message_headers, noop_app

REPUBLISH_AFTER = 30
#: How far ahead the tests make Beat decide (a busy Beat's lead is at most 0.5 s; a
#: longer one leaves a slow machine time to look before the fire's time comes).
LEAD = 2.0


@pytest.fixture
def app(database_url: str, redis_url: str) -> Iterator[Celery]:
    with noop_app(
        "sender-test", database_url, redis_url, gaffer_republish_after=REPUBLISH_AFTER
    ) as app:
        yield app


def soon(seconds: float) -> datetime:
    """The first whole second at least ``seconds`` from now."""
    now = datetime.now(timezone.utc) + timedelta(seconds=seconds)
    return now.replace(microsecond=0) + timedelta(seconds=1)


def sleep_until(moment: datetime) -> None:
    time.sleep(max(0.0, (moment - datetime.now(timezone.utc)).total_seconds()))


def utc(moment: datetime) -> datetime:
    return moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)


def fire_rows(app: Celery) -> dict[str, tuple[str, int, datetime | None]]:
    """schedule -> (state, publish_count, sent_at) of its fire."""
    database = database_for(app)
    fire = database.models.Fire
    with database.read() as conn:
        rows = conn.execute(
            select(fire.schedule, fire.state, fire.publish_count, fire.sent_at)
        ).all()
    return {name: (state, count, at and utc(at)) for name, state, count, at in rows}


def ticking_until(beat: Scheduler, condition: Callable[[], bool], timeout: float = 20.0) -> None:
    """Tick (as Beat's loop does, at most every 50 ms) until ``condition()`` holds."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(min(beat.tick(), 0.05))


def deciding_ahead(beat: Scheduler) -> Any:
    tick = beat._tick_state
    assert tick.held_sender.threaded  # a Beat on the real clock has its sender thread
    tick.wake.lead = LEAD  # the next tick decides the fires due within LEAD seconds
    return tick


def scheduled_ahead(app: Celery, name: str) -> tuple[Scheduler, datetime]:
    """A Beat about to decide ahead, and the nominal time of ``name``'s next fire."""
    nominal = soon(LEAD + 1)
    ScheduleStore(app).add(name, "t.noop", every(60, anchor=nominal))
    beat = Scheduler(app)
    deciding_ahead(beat)
    return beat, nominal


def tick_before(beat: Scheduler, nominal: datetime) -> None:
    """Tick half a second into the lead before ``nominal``: its fires are decided."""
    sleep_until(nominal - timedelta(seconds=LEAD - 0.5))
    beat.tick()


def test_a_fire_decided_ahead_is_held_and_sent_at_its_time_never_before(
    app: Celery, redis_url: str
) -> None:
    beat, nominal = scheduled_ahead(app, "ahead")
    try:
        tick_before(beat, nominal)
        # Decided and claimed, not sent: its time has not come.
        assert datetime.now(timezone.utc) < nominal
        assert fire_rows(app)["ahead"][:2] == ("pending", 1)
        assert message_headers(redis_url) == []
        ticking_until(beat, lambda: fire_rows(app)["ahead"][0] == "sent")
        [headers] = message_headers(redis_url)
        assert headers["gaffer_key"] == fire_key("ahead", nominal)
        _, count, sent_at = fire_rows(app)["ahead"]
        assert count == 1
        assert sent_at is not None
        assert sent_at >= nominal
    finally:
        beat.close()


def test_held_fires_go_out_at_their_own_times_while_no_tick_runs(
    app: Celery, redis_url: str
) -> None:
    nominal = soon(LEAD + 1)
    schedule = every(60, anchor=nominal, jitter=0.9)
    names = [f"j{n}" for n in range(5)]
    for name in names:
        ScheduleStore(app).add(name, "t.noop", schedule)
    send_ats = {name: schedule.send_at(fire_key(name, nominal), nominal) for name in names}
    beat = Scheduler(app)
    try:
        deciding_ahead(beat)
        tick_before(beat, nominal)  # decides and holds the five; no tick until all are out
        assert message_headers(redis_url) == []
        deadline = time.monotonic() + 20
        while len(message_headers(redis_url)) < len(names):
            assert time.monotonic() < deadline, "the thread did not send them"
            time.sleep(0.02)
        assert datetime.now(timezone.utc) >= max(send_ats.values())
        # Marked by the next ticks, each stamped when the thread sent it: at or after
        # its own send time.
        ticking_until(beat, lambda: all(row[0] == "sent" for row in fire_rows(app).values()))
        for name, (_, count, sent_at) in fire_rows(app).items():
            assert count == 1
            assert sent_at is not None
            assert sent_at >= send_ats[name] - timedelta(milliseconds=1), name
    finally:
        beat.close()


def test_a_stopping_beat_stops_its_sender_and_gives_back_what_it_holds(
    app: Celery, redis_url: str
) -> None:
    beat, nominal = scheduled_ahead(app, "held")
    tick = beat._tick_state
    sender = tick.held_sender._thread
    assert sender is not None
    try:
        # What Beat loaded at start is out of the collector's full passes while it runs.
        assert gc.get_freeze_count() > 0
        tick_before(beat, nominal)
        assert len(tick.held) == 1
        assert fire_rows(app)["held"][:2] == ("pending", 1)
    finally:
        beat.close()
    assert not sender.alive
    assert not tick.held_sender.threaded
    assert gc.get_freeze_count() == 0
    assert datetime.now(timezone.utc) < nominal
    # Given back: pending and unclaimed, for any Beat to send at its time; this one no
    # longer sends it.
    assert fire_rows(app)["held"][:2] == ("pending", 0)
    sleep_until(nominal + timedelta(seconds=0.5))
    assert message_headers(redis_url) == []


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_a_beat_whose_sender_thread_died_sends_its_held_fires_itself(
    app: Celery, redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    nominal = soon(LEAD + 1)
    ScheduleStore(app).add("orphan", "t.noop", every(60, anchor=nominal))
    beat = Scheduler(app, sender_thread=False)
    tick = beat._tick_state

    def die(producer: object) -> None:
        raise SystemExit("not an Exception: the thread ends")

    held_sender = tick.held_sender
    held_sender._thread = type("Stuck", (), {"alive": True})()  # holds, like a sender would
    try:
        tick.wake.lead = LEAD
        tick_before(beat, nominal)
        assert len(tick.held) == 1
        assert fire_rows(app)["orphan"][:2] == ("pending", 1)
        # The real thread takes over, and ends at its first send.
        held_sender._thread = None
        held_sender._send_from_thread = die  # type: ignore[method-assign]
        tick.start_sender()
        ticking_until(beat, lambda: fire_rows(app)["orphan"][0] == "sent")
        assert not held_sender.threaded
        assert "the thread sending held fires has stopped" in caplog.text
        [headers] = message_headers(redis_url)
        assert headers["gaffer_key"] == fire_key("orphan", nominal)
        sent_at = fire_rows(app)["orphan"][2]
        assert sent_at is not None
        assert sent_at >= nominal
    finally:
        if not hasattr(held_sender._thread, "stop"):
            held_sender._thread = None  # the stand-in
        beat.close()


def test_an_overdue_held_send_does_not_make_the_tick_spin(app: Celery) -> None:
    # The thread backing off after a failed round leaves a send overdue: the tick still
    # sleeps (up to a marking's wait), rather than returning 0 again and again.
    nominal = soon(LEAD + 1)
    ScheduleStore(app).add("overdue", "t.noop", every(60, anchor=nominal))
    beat = Scheduler(app, sender_thread=False)
    tick = beat._tick_state
    tick.held_sender._thread = type("Stuck", (), {"alive": True})()  # sends nothing
    try:
        tick.wake.lead = LEAD
        tick_before(beat, nominal)
        assert len(tick.held) == 1
        sleep_until(nominal + timedelta(seconds=MARK_EVERY + 0.1))  # overdue, unsent
        delays = [beat.tick() for _ in range(3)]
        assert all(delay >= MARK_EVERY * 0.9 for delay in delays), delays
        assert len(tick.held) == 1
    finally:
        tick.held_sender._thread = None
        beat.close()


def test_stopping_from_inside_a_held_sends_method_does_not_wait_for_the_thread() -> None:
    # Celery's Beat closes the scheduler from its SIGTERM handler, which can interrupt
    # the tick inside a HeldSends method: stop() must not wait 5 s for a thread that
    # cannot wake until that method returns; the thread ends right after it.
    held = HeldSends()
    calls: list[object] = []
    sender = Sender(held, lambda: datetime.now(timezone.utc), calls.append, lambda: None)
    sender.start()
    with held.changed:  # as if interrupted inside hold()
        started = time.monotonic()
        assert sender.stop(timeout=5.0)
        assert time.monotonic() - started < 1.0
    deadline = time.monotonic() + 5
    while sender.alive:
        assert time.monotonic() < deadline, "the thread did not end"
        time.sleep(0.01)
    # From outside any such method, stop() waits for the thread, as before.
    other = Sender(HeldSends(), lambda: datetime.now(timezone.utc), calls.append, lambda: None)
    other.start()
    assert other.stop(timeout=5.0)
    assert not other.alive


def test_a_close_from_a_signal_handler_inside_a_tick_leaves_the_database_to_the_next(
    app: Celery, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Celery's Beat closes its scheduler from its SIGTERM handler, then raises
    # SystemExit, and closes it again once the tick unwound. The first close, inside
    # the tick (which may hold a write transaction: on SQLite, a lock it would wait
    # 30 s for), only stops the thread; the second gives the held fire back.
    beat, nominal = scheduled_ahead(app, "term")
    tick = beat._tick_state
    try:
        tick_before(beat, nominal)
        assert len(tick.held) == 1

        def terminated() -> object:
            beat.close()  # what Celery's SIGTERM handler does first
            raise SystemExit

        monkeypatch.setattr(tick, "probe", terminated)
        with pytest.raises(SystemExit):
            beat.tick()
        assert not tick.held_sender.threaded
        assert len(tick.held) == 1  # not given back from inside the tick
        assert fire_rows(app)["term"][:2] == ("pending", 1)
    finally:
        beat.close()  # what Celery's Service does once the tick unwound
    assert fire_rows(app)["term"][:2] == ("pending", 0)
    assert datetime.now(timezone.utc) < nominal


def test_the_last_beat_to_close_gives_the_frozen_objects_back(app: Celery) -> None:
    first, second = Scheduler(app), Scheduler(app)
    try:
        assert gc.get_freeze_count() > 0
        first.close()
        first.close()  # Celery may close twice: counted once
        assert gc.get_freeze_count() > 0  # the second Beat still runs
    finally:
        first.close()
        second.close()
    assert gc.get_freeze_count() == 0


def test_a_process_that_froze_its_own_objects_keeps_them_frozen(app: Celery) -> None:
    gc.collect()
    gc.freeze()  # the host's own, before Beat starts (as a pre-forking server does)
    try:
        frozen = gc.get_freeze_count()
        beat = Scheduler(app)
        try:
            assert beat._tick_state.held_sender.threaded
        finally:
            beat.close()
        # Beat neither froze on top nor gave the host's objects back to the collector.
        assert 0 < gc.get_freeze_count() <= frozen
    finally:
        gc.unfreeze()
