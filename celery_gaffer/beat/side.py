"""Beat's side work on threads of its own, so that the tick never waits for it.

A :class:`SideThread` runs one job (deliver the due webhook alerts, make the partitions
ahead) in a loop: the job returns the seconds until it is next due, and the thread
sleeps that long, or until :meth:`SideThread.wake`. :meth:`SideThread.stop` returns at
once (it is called from Beat's signal handler too): a job under way finishes on the
daemon thread, or is cut short with the process. Every job keeps its state in the
database, so one cut short is done again later, by this Beat or another.

A job that raises is logged in one line (again only when the reason changes) and tried
again after ``retry`` seconds.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from ..exceptions import one_line

logger = logging.getLogger("celery_gaffer.scheduler")


class SideThread:
    """Runs ``job`` on a daemon thread named ``name`` until :meth:`stop` (see the module)."""

    def __init__(self, name: str, job: Callable[[], float], *, retry: float, action: str) -> None:
        self.name = name
        self._job = job
        self._retry = retry
        self._action = action
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._last_error: str | None = None

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name=self.name, daemon=True)
            self._thread.start()

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    @property
    def stopping(self) -> bool:
        """Set by :meth:`stop`: a job that loops checks it between steps."""
        return self._stopping.is_set()

    def wake(self) -> None:
        """Run the job now (or as soon as the run under way ends)."""
        self._wake.set()

    def stop(self, wait: float = 0.0) -> bool:
        """Ask the thread to end, waiting up to ``wait`` seconds; True: it has ended."""
        self._stopping.set()
        self._wake.set()
        thread, self._thread = self._thread, None
        if thread is None:
            return True
        thread.join(wait)
        return not thread.is_alive()

    def _loop(self) -> None:
        while not self._stopping.is_set():
            self._wake.clear()
            try:
                delay = self._job()
            except Exception as exc:  # noqa: BLE001 - a side job never ends Beat
                self._failed(one_line(exc))
                delay = self._retry
            else:
                self._last_error = None
            self._wake.wait(max(0.0, delay))

    def _failed(self, error: str) -> None:
        level = logging.DEBUG if error == self._last_error else logging.WARNING
        self._last_error = error
        logger.log(
            level,
            "%s: %s; trying again in %.0f s",
            self.name,
            error,
            self._retry,
            extra={"action": self._action},
        )
