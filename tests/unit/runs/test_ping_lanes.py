"""Pings go out on a thread per monitor origin: a monitor that hangs delays only its own
pings, a redirect is not followed, and the queues and threads are bounded. Real HTTP
servers on 127.0.0.1 (:mod:`tests.receivers`)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator

import pytest

from celery_gaffer.runs import pings
from celery_gaffer.runs.pings import Pinger

from ...receivers import RawReceiver, hang, redirect, status

RID = "6f1c1d2e-8a0b-4c1e-9d6f-1a2b3c4d5e6f"


@pytest.fixture
def stop() -> Iterator[threading.Event]:
    event = threading.Event()
    yield event
    event.set()


def _wait_for(done: object, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not done():  # type: ignore[operator]
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def test_a_hanging_monitor_delays_neither_the_caller_nor_other_monitors(
    stop: threading.Event, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(pings, "RETRY_DELAYS", (0.0, 0.0))
    hung, fine = RawReceiver(hang(stop)), RawReceiver(status(200))
    pinger = Pinger()
    try:
        started = time.monotonic()
        for _ in range(50):
            pinger.send(hung.url("/hung-check"), "start", RID)
        for event in ("start", "success"):
            pinger.send(fine.url("/fine-check"), event, RID)
        assert time.monotonic() - started < 0.5  # a run never waits for a ping
        _wait_for(lambda: len(fine.requests) == 2, 2.0)
        assert [r.path for r in fine.requests] == [
            f"/fine-check/start?rid={RID}",
            f"/fine-check?rid={RID}",
        ]
        assert len(hung.requests) == 1  # its own pings wait their turn
    finally:
        stop.set()
        hung.stop()
        fine.stop()
    with caplog.at_level(logging.CRITICAL, logger="celery_gaffer.pings"):
        pinger.join()  # the hung ones fail at once now


def test_a_redirected_ping_is_not_followed_and_is_given_up_with_one_line(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(pings, "RETRY_DELAYS", (0.0, 0.0))
    other = RawReceiver(status(200))
    receiver = RawReceiver(redirect(other.url("/elsewhere")))
    try:
        pinger = Pinger()
        with caplog.at_level(logging.WARNING, logger="celery_gaffer.pings"):
            pinger.send(receiver.url("/check-secret", user="u:pw-secret@"), "fail", RID)
            pinger.join()
    finally:
        receiver.stop()
        other.stop()
    assert len(receiver.requests) == 3
    assert other.requests == []
    [record] = caplog.records
    message = record.getMessage()
    assert "given up: answered 302 Found: redirects are not followed" in message
    assert "check-secret" not in message
    assert "pw-secret" not in message


def test_origins_past_the_limit_share_one_thread_and_idle_threads_end(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(pings, "MAX_LANES", 2)
    monkeypatch.setattr(pings, "IDLE_AFTER", 0.2)
    receivers = [RawReceiver(status(200)) for _ in range(4)]
    try:
        pinger = Pinger()
        for receiver in receivers:
            pinger.send(receiver.url("/c"), "start", None)
        lanes = set(pinger._lanes)
        pinger.join()
        assert all(len(r.requests) == 1 for r in receivers)
        assert len(lanes) == 3
        assert "*" in lanes
        _wait_for(lambda: not pinger._lanes, 2.0)  # idle: their threads ended
        pinger.send(receivers[0].url("/c"), "success", None)  # and start again on demand
        pinger.join()
        assert len(receivers[0].requests) == 2
    finally:
        for receiver in receivers:
            receiver.stop()


def test_a_full_queue_drops_the_ping_with_a_warning(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, stop: threading.Event
) -> None:
    monkeypatch.setattr(pings, "QUEUE_LIMIT", 2)
    monkeypatch.setattr(pings, "RETRY_DELAYS", (0.0, 0.0))
    hung = RawReceiver(hang(stop))
    pinger = Pinger()
    with caplog.at_level(logging.WARNING, logger="celery_gaffer.pings"):
        try:
            pinger.send(hung.url("/x"), "start", None)  # taken by the thread: it hangs
            _wait_for(lambda: len(hung.requests) == 1, 2.0)
            for _ in range(3):
                pinger.send(hung.url("/x"), "start", None)
        finally:
            stop.set()
            hung.stop()
        pinger.join()  # the rest fail at once now, and are given up
    dropped = [r for r in caplog.records if getattr(r, "action", "") == "ping_dropped"]
    assert len(dropped) == 1
    assert "/x" not in dropped[0].getMessage()
