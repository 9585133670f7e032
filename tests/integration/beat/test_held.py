"""Jittered fires held by the Beat that claimed them: sent at their own time without a
database round trip, once across Beats, given back when Beat stops, taken over by
another Beat when it dies (real databases, real Redis, an injected clock)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from datetime import datetime, timedelta, timezone

import pytest
from celery import Celery
from sqlalchemy import select

from celery_gaffer import Scheduler, ScheduleStore, every
from celery_gaffer.protocol import fire_key
from celery_gaffer.store import database_for
from celery_gaffer.store import fires as ledger

from ...support import FrozenClock, message_headers, noop_app

REPUBLISH_AFTER = 30
NOMINAL = datetime(2026, 6, 1, 12, 1, tzinfo=timezone.utc)


@pytest.fixture
def app(database_url: str, redis_url: str) -> Iterator[Celery]:
    with noop_app(
        "held-test", database_url, redis_url, gaffer_republish_after=REPUBLISH_AFTER
    ) as app:
        yield app


def sent_keys(redis_url: str) -> list[str]:
    return [h["gaffer_key"] for h in message_headers(redis_url)]


def fire_row(app: Celery) -> tuple[str, int, datetime]:
    database = database_for(app)
    fire = database.models.Fire
    with database.read() as conn:
        state, count, after = conn.execute(
            select(fire.state, fire.publish_count, fire.publish_after)
        ).one()
    return state, count, after


def jittered(app: Celery, clock: FrozenClock, jitter: float) -> datetime:
    """One ``every(60)`` schedule with ``jitter``; the send time of its fire at NOMINAL."""
    schedule = every(60, jitter=jitter)
    ScheduleStore(app, clock=clock).add("j", "t.noop", schedule)
    send_at = schedule.send_at(fire_key("j", NOMINAL), NOMINAL)
    assert send_at > NOMINAL
    return send_at


def holding(app: Celery, clock: FrozenClock) -> tuple[datetime, Scheduler]:
    """A Beat that has decided, and holds, the fire at NOMINAL of a schedule with a
    jitter under a second; that fire's send time."""
    send_at = jittered(app, clock, 0.9)
    beat = Scheduler(app, clock=clock)
    clock.now = NOMINAL
    beat.tick()
    return send_at, beat


def test_a_fire_sent_within_a_second_is_claimed_when_decided_and_sent_at_its_time(
    app: Celery, clock: FrozenClock, redis_url: str
) -> None:
    send_at = jittered(app, clock, 0.9)
    beat, other = Scheduler(app, clock=clock), Scheduler(app, clock=clock)
    clock.now = NOMINAL
    delay = beat.tick()
    assert delay == pytest.approx((send_at - NOMINAL).total_seconds(), abs=0.001)
    state, count, after = fire_row(app)
    # Claimed by the insert: no other Beat may send it before REPUBLISH_AFTER past its time.
    assert (state, count) == ("pending", 1)
    assert after == send_at + timedelta(seconds=REPUBLISH_AFTER)
    assert sent_keys(redis_url) == []
    clock.now = send_at
    other.tick()
    assert sent_keys(redis_url) == []
    beat.tick()
    assert sent_keys(redis_url) == [fire_key("j", NOMINAL)]
    assert fire_row(app)[:2] == ("sent", 1)
    other.tick()
    beat.tick()
    assert len(sent_keys(redis_url)) == 1


def test_a_wake_for_a_held_send_makes_no_database_round_trip(
    app: Celery, clock: FrozenClock, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    send_at, beat = holding(app, clock)
    probes: list[object] = []
    tick = beat._tick_state
    real_probe, real_claim = tick.probe, tick.publish_pending
    monkeypatch.setattr(tick, "probe", lambda: probes.append(1) or real_probe())
    monkeypatch.setattr(tick, "publish_pending", lambda now: probes.append(2) or real_claim(now))
    # Sent through the held path only: no probe, no claim.
    clock.now = send_at
    delay = beat.tick()
    assert sent_keys(redis_url) == [fire_key("j", NOMINAL)]
    assert probes == []
    # The database work is due when it was before the held send (max_interval after
    # NOMINAL: the next fire is a minute away), no later.
    due_in = beat.max_interval - (send_at - NOMINAL).total_seconds()
    assert delay == pytest.approx(due_in, abs=0.001)
    clock.now = NOMINAL + timedelta(seconds=beat.max_interval)
    beat.tick()
    assert probes[:1] == [1]


def test_pending_fires_are_claimed_ahead_of_their_time_and_sent_at_it(
    app: Celery, clock: FrozenClock, redis_url: str
) -> None:
    send_at = jittered(app, clock, 50)
    beat, other = Scheduler(app, clock=clock), Scheduler(app, clock=clock)
    clock.now = NOMINAL
    beat.tick()
    if send_at - NOMINAL <= timedelta(seconds=1):
        pytest.fail("this key's jitter delay is too short for the test")
    assert fire_row(app) == ("pending", 0, send_at)  # far off: not claimed yet
    clock.now = send_at - timedelta(seconds=0.4)
    delay = other.tick()
    assert fire_row(app)[:2] == ("pending", 1)
    assert sent_keys(redis_url) == []
    assert delay == pytest.approx(0.4, abs=0.001)
    # Claimed and held by the other Beat: nothing is due for this one (no spinning).
    assert beat.tick() > 1
    clock.now = send_at
    beat.tick()
    assert sent_keys(redis_url) == []  # held by the other Beat, which claimed it
    other.tick()
    assert sent_keys(redis_url) == [fire_key("j", NOMINAL)]
    assert fire_row(app)[:2] == ("sent", 1)


def test_a_beat_that_stops_gives_its_held_fires_back(
    app: Celery, clock: FrozenClock, redis_url: str
) -> None:
    send_at, beat = holding(app, clock)
    beat.close()
    assert fire_row(app) == ("pending", 0, send_at)
    clock.now = send_at
    Scheduler(app, clock=clock).tick()
    assert sent_keys(redis_url) == [fire_key("j", NOMINAL)]
    assert fire_row(app)[:2] == ("sent", 1)


def test_the_held_fires_of_a_beat_that_died_are_sent_once_its_claim_runs_out(
    app: Celery, clock: FrozenClock, redis_url: str
) -> None:
    send_at = jittered(app, clock, 0.9)
    Scheduler(app, clock=clock).tick()
    clock.now = NOMINAL
    Scheduler(app, clock=clock).tick()  # decides and holds the fire, then is gone
    other = Scheduler(app, clock=clock)
    clock.now = send_at + timedelta(seconds=REPUBLISH_AFTER - 0.5)
    other.tick()
    assert sent_keys(redis_url) == []
    assert fire_row(app)[:2] == ("pending", 1)  # a live claim is never taken early
    clock.now = send_at + timedelta(seconds=REPUBLISH_AFTER)
    other.tick()
    assert sent_keys(redis_url) == [fire_key("j", NOMINAL)]
    assert fire_row(app)[:2] == ("sent", 2)


def test_a_beat_that_stops_late_leaves_a_fire_another_beat_took_over_alone(
    app: Celery, clock: FrozenClock, redis_url: str
) -> None:
    send_at = jittered(app, clock, 0.9)
    stalled = Scheduler(app, clock=clock)
    clock.now = NOMINAL
    stalled.tick()  # holds the fire, then stalls past its claim
    # Another Beat's claim, about to publish it.
    clock.now = send_at + timedelta(seconds=REPUBLISH_AFTER)
    database = database_for(app)
    until = clock.now + timedelta(seconds=REPUBLISH_AFTER)
    with database.begin() as conn:
        [taken] = ledger.claim_pending(conn, database.models, clock.now, until, 10)
    assert taken.send_at == send_at + timedelta(seconds=REPUBLISH_AFTER)
    stalled.close()
    assert fire_row(app) == ("pending", 2, until)
    assert sent_keys(redis_url) == []


@pytest.mark.parametrize("republish_after", [1])
def test_with_the_shortest_republish_after_two_beats_send_each_fire_once(
    database_url: str, redis_url: str, clock: FrozenClock, republish_after: int
) -> None:
    """A claim ending within the hold window is not taken early by the other Beat's
    claim-ahead: neither a held fire, nor one sent and waiting to be marked."""
    with noop_app(
        "held-short", database_url, redis_url, gaffer_republish_after=republish_after
    ) as app:
        store = ScheduleStore(app, clock=clock)
        schedules = {f"j{n}": every(60, jitter=0.9) for n in range(20)}
        for name, schedule in schedules.items():
            store.add(name, "t.noop", schedule)
        sends = sorted(
            schedule.send_at(fire_key(name, NOMINAL), NOMINAL)
            for name, schedule in schedules.items()
        )
        first, second = Scheduler(app, clock=clock), Scheduler(app, clock=clock)
        clock.now = NOMINAL
        first.tick()
        second.tick()
        # Step through the second: at every send time the second Beat claims what is
        # due, as a busy Beat does on every round of its loop, before the first Beat
        # sends; then both tick; then past the claims' end (send + 1 s).
        for at in [*sends, sends[-1] + timedelta(seconds=republish_after + 0.5)]:
            clock.now = at
            second._tick_state.publish_pending(at)
            first.tick()
            second.tick()
        first.close()
        second.close()
        keys = sent_keys(redis_url)
        assert sorted(keys) == sorted(fire_key(name, NOMINAL) for name in schedules)
        assert len(keys) == len(set(keys))


def test_a_clock_stepped_back_does_not_hold_the_database_work_up(
    app: Celery, clock: FrozenClock, redis_url: str
) -> None:
    send_at, beat = holding(app, clock)
    clock.now = send_at
    beat.tick()  # sent; the database work is due at NOMINAL + max_interval
    clock.now = send_at - timedelta(hours=1)
    assert beat.tick() <= beat.max_interval


def test_held_fires_of_one_schedule_are_each_sent_with_their_own_payload(
    app: Celery, clock: FrozenClock, redis_url: str
) -> None:
    send_at, beat = holding(app, clock)
    tick = beat._tick_state
    [(held, payload)] = tick.held.due(send_at)
    edited = replace(payload, args=["edited"])
    # The same schedule, an edit between two claims: two payloads due at once.
    other = replace(held, id=held.id + 10_000, key=held.key + "-2", task_id=held.task_id[:-1] + "x")
    tick.held.hold(held, payload, send_at, send_at + timedelta(seconds=REPUBLISH_AFTER))
    tick.held.hold(other, edited, send_at, send_at + timedelta(seconds=REPUBLISH_AFTER))
    clock.now = send_at
    beat.tick()
    args = sorted(h["argsrepr"] for h in message_headers(redis_url))
    assert args == ["()", "['edited']"]
