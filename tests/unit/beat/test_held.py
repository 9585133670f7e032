"""HeldSends: held fires come out in send-time order; marking waits only while sends
follow closely, and never longer than MARK_EVERY or past MARK_BATCH fires."""

from __future__ import annotations

import threading
from datetime import datetime, timedelta, timezone

import pytest

from celery_gaffer.beat.held import FOLLOWS_CLOSELY, MARK_BATCH, MARK_EVERY, Guard, HeldSends
from celery_gaffer.store.fires import Fire
from celery_gaffer.store.schedules import Payload

T0 = datetime(2026, 6, 1, 12, 0, tzinfo=timezone.utc)
PAYLOAD = Payload("t.noop", [], {}, {})


class Ticker:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def fire(n: int) -> Fire:
    return Fire(n, f"s{n}", T0, f"s{n}@k", f"id{n}", "scheduled", 1, T0)


def held(monotonic: Ticker, offsets_ms: list[int]) -> HeldSends:
    sends = HeldSends(monotonic)
    for n, ms in enumerate(offsets_ms):
        at = T0 + timedelta(milliseconds=ms)
        sends.hold(fire(n), PAYLOAD, at, at + timedelta(seconds=30))
    return sends


def test_due_fires_come_out_in_send_order_and_only_once_their_time_has_come() -> None:
    sends = held(Ticker(), [300, 100, 200, 900])
    assert sends.due(T0 + timedelta(milliseconds=99)) == []
    due = sends.due(T0 + timedelta(milliseconds=300))
    assert [(f.id, payload) for f, payload in due] == [(1, PAYLOAD), (2, PAYLOAD), (0, PAYLOAD)]
    assert sends.next_at() == T0 + timedelta(milliseconds=900)
    assert len(sends) == 1
    assert sends.due(T0 + timedelta(milliseconds=300)) == []


def test_dropped_schedules_are_no_longer_held() -> None:
    sends = held(Ticker(), [300, 100, 200])
    sends.drop(["s1"])
    assert [f.id for f, _ in sends.due(T0 + timedelta(seconds=1))] == [2, 0]


def test_marking_waits_while_the_next_send_follows_closely_then_at_most_mark_every() -> None:
    monotonic = Ticker()
    close = int(FOLLOWS_CLOSELY.total_seconds() * 1000) // 2
    sends = held(monotonic, [0, close])
    now = T0
    [(first, _)] = sends.due(now)
    sends.sent([first], now)
    assert sends.to_mark(now) == []  # the next send is `close` ms away
    assert sends.mark_in() == pytest.approx(MARK_EVERY)
    monotonic.now += MARK_EVERY
    assert sends.to_mark(now) == [(now, [first])]
    assert sends.mark_in() is None


def test_marking_is_at_once_when_no_send_follows_closely_or_the_batch_is_full() -> None:
    monotonic = Ticker()
    far = int(FOLLOWS_CLOSELY.total_seconds() * 1000) * 2
    sends = held(monotonic, [0, far])
    [(first, _)] = sends.due(T0)
    sends.sent([first], T0)
    assert sends.to_mark(T0) == [(T0, [first])]

    sends = held(monotonic, [0, 1])
    later = T0 + timedelta(milliseconds=1)
    sends.sent([fire(n) for n in range(MARK_BATCH - 1)], T0)
    assert sends.to_mark(T0) == []
    sends.sent([fire(MARK_BATCH)], later)
    # Each group keeps the time it was sent at (delivery confirmation orders by it).
    assert [(at, len(fires)) for at, fires in sends.to_mark(T0)] == [
        (T0, MARK_BATCH - 1),
        (later, 1),
    ]
    sends.sent([fire(1)], T0)
    assert sends.to_mark(T0) == []
    assert sends.to_mark(T0, force=True) == [(T0, [fire(1)])]


def test_release_gives_every_unsent_claim_back() -> None:
    sends = held(Ticker(), [500, 100])
    claims = sends.release()
    assert sorted(claims) == [
        (0, T0 + timedelta(milliseconds=500), T0 + timedelta(milliseconds=500, seconds=30)),
        (1, T0 + timedelta(milliseconds=100), T0 + timedelta(milliseconds=100, seconds=30)),
    ]
    assert len(sends) == 0
    assert sends.next_at() is None


def test_the_guard_knows_whether_this_thread_holds_it_however_deeply() -> None:
    guard = Guard()
    assert not guard.held_here()
    seen_elsewhere: list[bool] = []
    with guard:
        with guard:
            assert guard.held_here()
        assert guard.held_here()
        thread = threading.Thread(target=lambda: seen_elsewhere.append(guard.held_here()))
        thread.start()
        thread.join()
    assert not guard.held_here()
    assert seen_elsewhere == [False]
