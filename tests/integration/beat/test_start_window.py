"""A stop signal that arrives once the database answered but before Beat's side work has
started still ends this Scheduler's start-up, and stops what it had started (no second
Scheduler, no thread left running). A real signal to this process, a real SQLite file."""

from __future__ import annotations

import os
import signal
import threading

import pytest

from celery_gaffer import Scheduler

from ...support import noop_app


class SignalledScheduler(Scheduler):
    """Receives SIGTERM right after its sender thread started."""

    def _start_side_work(self) -> None:
        super()._start_side_work()
        os.kill(os.getpid(), signal.SIGTERM)
        threading.Event().wait(5)  # the signal cuts this short


def test_a_stop_signal_while_side_work_starts_ends_beat_and_stops_its_threads(
    celery_handlers: None, sqlite_url: str
) -> None:
    before = set(threading.enumerate())
    with noop_app("start-window", sqlite_url) as app, pytest.raises(SystemExit) as info:
        SignalledScheduler(app, sender_thread=True, lazy=False)
    assert info.value.code == 0
    left = [t for t in set(threading.enumerate()) - before if t.is_alive()]
    for thread in left:
        thread.join(2)
    assert [t.name for t in left if t.is_alive()] == []
