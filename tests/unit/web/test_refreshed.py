"""The overview's kept values: read again in the background, backing off after a failed
read (one log line, no traceback), never left marked as reading by a thread that could
not start. Time is the injected clock's."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import cast

import pytest

from celery_gaffer.exceptions import DatabaseUnavailable
from celery_gaffer.web.console import Console
from celery_gaffer.web.refreshed import Refreshed

from ...support import FrozenClock

TTL = 60.0
CONSOLE = cast(Console, object())  # the loads below never look at it


class Loads:
    """A load function that answers its values in turn, or fails while ``down``."""

    def __init__(self) -> None:
        self.calls = 0
        self.down = False

    def __call__(self, console: Console, now: datetime) -> str:
        self.calls += 1
        if self.down:
            raise DatabaseUnavailable("the database is down")
        return f"value {self.calls}"


def test_a_failed_read_again_keeps_the_value_and_waits_a_ttl_before_the_next(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock, load = FrozenClock(), Loads()
    kept = Refreshed(load, TTL)
    assert kept.get(CONSOLE, clock()) == ("value 1", clock())
    first_read = clock()
    load.down = True
    with caplog.at_level(logging.WARNING, logger="celery_gaffer.web"):
        clock.advance(TTL)
        assert kept.get(CONSOLE, clock())[0] == "value 1"  # answered at once
        kept.wait()
        failed_at = clock()
        assert load.calls == 2
        # Live polling every 5 s while the database is down: no read until a TTL passes.
        for _ in range(11):
            clock.advance(5)
            assert kept.get(CONSOLE, clock()) == ("value 1", first_read)
            kept.wait()
        assert load.calls == 2
    failures = [r for r in caplog.records if r.name == "celery_gaffer.web"]
    assert len(failures) == 1
    assert failures[0].levelno == logging.WARNING
    assert failures[0].exc_info is None  # one line, no traceback
    assert "DatabaseUnavailable: the database is down" in failures[0].getMessage()
    clock.advance(5)  # a TTL after the failure: read again, and this time it works
    assert clock() - failed_at >= timedelta(seconds=TTL)
    load.down = False
    assert kept.get(CONSOLE, clock())[0] == "value 1"
    kept.wait()
    assert load.calls == 3
    assert kept.get(CONSOLE, clock()) == ("value 3", clock())


def test_a_thread_that_cannot_start_leaves_nothing_marked_as_reading() -> None:
    clock, load = FrozenClock(), Loads()
    started: list[threading.Thread] = []
    refuse = [True]

    def spawn(target: Callable[[], None]) -> threading.Thread:
        if refuse[0]:
            raise RuntimeError("can't start new thread")
        thread = threading.Thread(target=target, daemon=True)
        thread.start()
        started.append(thread)
        return thread

    kept = Refreshed(load, TTL, spawn=spawn)
    kept.get(CONSOLE, clock())
    clock.advance(TTL)
    with pytest.raises(RuntimeError):
        kept.get(CONSOLE, clock())
    refuse[0] = False
    assert kept.get(CONSOLE, clock())[0] == "value 1"  # tried again, not stuck
    kept.wait()
    assert len(started) == 1
    assert kept.get(CONSOLE, clock()) == ("value 2", clock())
