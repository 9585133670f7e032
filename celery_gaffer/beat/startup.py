"""How Beat's start-up ends: SIGTERM and SIGINT end its wait for the database, and a
mistake to fix ends Beat with one line and exit status 2, never a traceback.

``celery beat`` builds its scheduler inside ``Service.start``, and its SIGTERM and
SIGINT handlers close that scheduler: a signal that arrives while the scheduler is
still being built (waiting for its database) makes Celery build a second one, which
starts the same wait. So while the first waits, the handlers are ours; once Beat is
leaving, a further signal (``timeout`` and supervisors forward theirs, a second Ctrl-C)
only repeats the exit. Both ends are ``SystemExit``, which Celery's beat program lets
through without logging it.
"""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any, NoReturn

from ..exceptions import GafferError

logger = logging.getLogger("celery_gaffer.scheduler")

#: The exit status of a Beat that cannot start (the CLI's status for every error).
CANNOT_START = 2
_STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)

Handler = Callable[[int, FrameType | None], Any]


class Stopped(BaseException):
    """SIGTERM or SIGINT arrived while Beat waited for its database at start-up."""

    def __init__(self, signal_name: str) -> None:
        super().__init__(signal_name)
        self.signal_name = signal_name


@contextmanager
def stoppable_start(where: str) -> Iterator[None]:
    """Run Beat's start-up so that SIGTERM and SIGINT end it at once (``SystemExit(0)``,
    after one line naming the database at ``where``).

    Only the main thread can set handlers: an embedded Beat keeps its host's. Once the
    start-up ends with ``SystemExit``, the handlers stay ones that raise it again.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {signum: signal.getsignal(signum) for signum in _STOP_SIGNALS}
    _handle_stop_signals(_StopOnce())
    try:
        yield
    except Stopped as stopped:
        logger.warning(  # further signals are still swallowed here: this line is written
            "Beat stopped by %s while waiting for the Gaffer database at %s",
            stopped.signal_name,
            where,
            extra={"action": "beat_stopped_while_waiting"},
        )
        _handle_stop_signals(_exit_again(0))
        raise SystemExit(0) from None
    except SystemExit as leaving:
        _handle_stop_signals(_exit_again(leaving.code))
        raise
    except BaseException:
        _restore(previous)
        raise
    _restore(previous)


def cannot_start(exc: GafferError) -> NoReturn:
    """End Beat: one CRITICAL line naming the cause and the fix, then exit status 2."""
    message = " ".join(str(exc).split())
    logger.critical("Beat cannot start: %s", message, extra={"action": "beat_cannot_start"})
    raise SystemExit(CANNOT_START) from exc


class _StopOnce:
    """Raise Stopped for the first stop signal only: signals sent together (a
    supervisor's and the user's) must not interrupt the first one's exit."""

    def __init__(self) -> None:
        self.fired = False

    def __call__(self, signum: int, _frame: FrameType | None) -> None:
        if not self.fired:
            self.fired = True
            raise Stopped(signal.Signals(signum).name)


def _exit_again(code: str | int | None) -> Handler:
    def handler(_signum: int, _frame: FrameType | None) -> None:
        raise SystemExit(code)

    return handler


def _handle_stop_signals(handler: Handler) -> None:
    for signum in _STOP_SIGNALS:
        signal.signal(signum, handler)


def _restore(previous: dict[signal.Signals, Handler | int | signal.Handlers | None]) -> None:
    for signum, handler in previous.items():
        # None: a handler set outside Python, which cannot be put back as it was.
        signal.signal(signum, signal.SIG_DFL if handler is None else handler)
