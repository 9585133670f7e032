"""Beat's side threads: a job's delay, an early wake, a failure logged once per reason,
a stop that never waits for a job under way, and partition upkeep off the tick."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from datetime import datetime, timezone

import pytest

from celery_gaffer.beat.partition_keeper import PartitionKeeper
from celery_gaffer.beat.side import SideThread


def _wait_for(done: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_the_job_runs_again_after_its_delay_or_when_woken() -> None:
    runs: list[float] = []
    thread = SideThread("t", lambda: runs.append(time.monotonic()) or 3600.0, retry=1, action="x")
    thread.start()
    try:
        _wait_for(lambda: len(runs) == 1)
        time.sleep(0.1)
        assert len(runs) == 1  # next due in an hour
        thread.wake()
        _wait_for(lambda: len(runs) == 2)
    finally:
        assert thread.stop(wait=1.0)


def test_a_failing_job_is_retried_and_logged_once_per_reason(
    caplog: pytest.LogCaptureFixture,
) -> None:
    reasons = ["down", "down", "down", "other"]
    calls: list[int] = []

    def job() -> float:
        calls.append(1)
        if len(calls) <= len(reasons):
            raise OSError(reasons[len(calls) - 1])
        return 3600.0

    thread = SideThread("gaffer-x", job, retry=0.01, action="x_failed")
    with caplog.at_level(logging.DEBUG, logger="celery_gaffer.scheduler"):
        thread.start()
        _wait_for(lambda: len(calls) == 5)
        thread.stop(wait=1.0)
    failed = [r for r in caplog.records if getattr(r, "action", "") == "x_failed"]
    assert [r.levelname for r in failed] == ["WARNING", "DEBUG", "DEBUG", "WARNING"]
    assert failed[0].getMessage() == "gaffer-x: OSError: down; trying again in 0 s"
    assert all(r.exc_info is None for r in failed)  # one line, no traceback


def test_stop_returns_at_once_while_a_job_is_under_way() -> None:
    release = threading.Event()
    started = threading.Event()

    def job() -> float:
        started.set()
        release.wait(10)
        return 3600.0

    thread = SideThread("t", job, retry=1, action="x")
    thread.start()
    started.wait(5)
    began = time.monotonic()
    assert thread.stop() is False  # still in its job: left to finish on its own
    assert time.monotonic() - began < 0.1
    release.set()


class SlowKeeper(PartitionKeeper):
    """A keeper whose check takes as long as a big move out of the default partition."""

    def keep(self, now: datetime) -> None:
        self.calls.append(now)
        self.release.wait(10)


def test_partition_upkeep_on_its_own_thread_never_holds_the_tick() -> None:
    keeper = SlowKeeper(database=None)  # type: ignore[arg-type]
    keeper.calls, keeper.release = [], threading.Event()  # type: ignore[attr-defined]
    now = datetime(2026, 6, 1, tzinfo=timezone.utc)
    keeper.start(lambda: now)
    try:
        _wait_for(lambda: len(keeper.calls) == 1)  # type: ignore[attr-defined]
        began = time.monotonic()
        keeper.on_tick(now)  # the tick: nothing to do, the thread keeps them
        keeper.stop()
        assert time.monotonic() - began < 0.1
    finally:
        keeper.release.set()  # type: ignore[attr-defined]
    assert len(keeper.calls) == 1  # type: ignore[attr-defined]
