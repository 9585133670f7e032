"""Beat's start-up ends on a stop signal or a mistake with ``SystemExit``, never a second
wait nor a traceback. Real signals sent to this process; no Beat, no database."""

from __future__ import annotations

import logging
import os
import signal
import threading

import pytest

from celery_gaffer import ConfigurationError
from celery_gaffer.beat.startup import Stopped, cannot_start, stoppable_start

from ...support import STOP_SIGNALS, celerys_handler


def _signal_and_wait(signum: int) -> None:
    """Send ``signum`` to this process inside a wait it cuts short (as the start-up's)."""
    os.kill(os.getpid(), signum)
    threading.Event().wait(5)


def _start_and_signal(signum: int) -> None:
    with stoppable_start("sqlite:///gaffer.sqlite3"):
        _signal_and_wait(signum)


@pytest.mark.parametrize("signum", STOP_SIGNALS, ids=["SIGTERM", "SIGINT"])
def test_a_stop_signal_during_the_start_up_ends_it_with_status_0_and_one_line(
    celery_handlers: None, signum: int, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, "celery_gaffer")
    with pytest.raises(SystemExit) as info:
        _start_and_signal(signum)
    assert info.value.code == 0
    [record] = caplog.records
    assert record.action == "beat_stopped_while_waiting"  # type: ignore[attr-defined]
    assert signal.Signals(signum).name in record.getMessage()
    # Beat is leaving: a later signal repeats the exit instead of reaching Celery's handler.
    with pytest.raises(SystemExit) as again:
        _signal_and_wait(signal.SIGTERM)
    assert again.value.code == 0


def _two_signals_at_once() -> None:
    with stoppable_start("sqlite:///gaffer.sqlite3"):
        handler = signal.getsignal(signal.SIGTERM)
        assert callable(handler)
        try:
            handler(signal.SIGTERM, None)
        finally:
            handler(signal.SIGINT, None)  # the second one, while the first unwinds: nothing


def test_signals_sent_together_raise_once(celery_handlers: None) -> None:
    with pytest.raises(SystemExit) as info:
        _two_signals_at_once()
    assert info.value.code == 0
    assert info.value.__context__ is not None
    assert isinstance(info.value.__context__, Stopped)


def test_a_start_up_that_succeeds_gives_the_handlers_back(celery_handlers: None) -> None:
    with stoppable_start("sqlite:///gaffer.sqlite3"):
        assert signal.getsignal(signal.SIGTERM) is not celerys_handler
    assert all(signal.getsignal(signum) is celerys_handler for signum in STOP_SIGNALS)


def _start_and_break() -> None:
    with stoppable_start("sqlite:///gaffer.sqlite3"):
        raise KeyError("boom")


def test_an_unexpected_error_gives_the_handlers_back(celery_handlers: None) -> None:
    with pytest.raises(KeyError):
        _start_and_break()
    assert all(signal.getsignal(signum) is celerys_handler for signum in STOP_SIGNALS)


def _start_and_fail(mistake: ConfigurationError) -> None:
    with stoppable_start("sqlite:///gaffer.sqlite3"):
        cannot_start(mistake)


def test_a_mistake_ends_the_start_up_with_status_2_and_one_line(
    celery_handlers: None, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, "celery_gaffer")
    mistake = ConfigurationError("gaffer_lease_ttl: must be at least 1 s,\n got -5")
    with pytest.raises(SystemExit) as info:
        _start_and_fail(mistake)
    assert info.value.code == 2
    assert info.value.__cause__ is mistake
    [record] = caplog.records
    assert record.levelno == logging.CRITICAL
    assert record.action == "beat_cannot_start"  # type: ignore[attr-defined]
    assert record.getMessage() == (
        "Beat cannot start: gaffer_lease_ttl: must be at least 1 s, got -5"
    )
    with pytest.raises(SystemExit) as again:  # a signal during the exit keeps its status
        _signal_and_wait(signal.SIGINT)
    assert again.value.code == 2


def test_an_embedded_beat_keeps_its_hosts_handlers(celery_handlers: None) -> None:
    seen: list[object] = []

    def start() -> None:
        with stoppable_start("sqlite:///gaffer.sqlite3"):
            seen.append(signal.getsignal(signal.SIGTERM))

    thread = threading.Thread(target=start)
    thread.start()
    thread.join(10)
    assert seen == [celerys_handler]
