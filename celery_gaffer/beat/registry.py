"""This Beat's row in the Beats' registry (``{prefix}beats``), so that the console and
``status`` can tell a running Beat from a stopped one.

The row (name ``<host>:<pid>``) is written when Beat starts, then ``last_tick_at`` is
moved to the time of its latest tick at most every :data:`REFRESH_EVERY` seconds, and
the row is removed when Beat stops cleanly. A Beat that was killed leaves its row
behind: it stops moving, and any Beat removes the rows of Beats that have not ticked for
:data:`FORGET_AFTER`.

The tick only notes when it ran (:meth:`Registry.ticked`); once :meth:`Registry.start`
ran, the row is written by a thread of its own (:mod:`.side`), so the tick never waits
for it. A Beat driven by an injected clock writes it from the tick instead, on that
clock.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from collections.abc import Callable
from datetime import datetime, timedelta

from sqlalchemy.exc import DBAPIError

from ..exceptions import DatabaseUnavailable, one_line
from ..store import Database, beats
from .side import SideThread

logger = logging.getLogger("celery_gaffer.beat")

#: Seconds between two writes of ``last_tick_at``, at most.
REFRESH_EVERY = 5.0
#: A Beat that has not ticked for this long is taken for dead: its row is removed.
FORGET_AFTER = timedelta(days=1)
#: How often a Beat looks for the rows of dead Beats.
PRUNE_EVERY = timedelta(hours=1)
#: Longest a clean shutdown waits for a write under way before it removes the row.
STOP_WAIT = 0.5


def beat_name() -> tuple[str, str, int]:
    """``(name, host, pid)`` of the Beat of this process."""
    host, pid = socket.gethostname(), os.getpid()
    return f"{host}:{pid}", host, pid


class Registry:
    """The registry row of one Beat (see the module)."""

    def __init__(self, database: Database, clock: Callable[[], datetime]) -> None:
        self.database = database
        self.clock = clock
        self.name, self.host, self.pid = beat_name()
        self.started_at: datetime | None = None
        #: When the tick last ran, and the time last written as ``last_tick_at``.
        self._ticked_at: datetime | None = None
        self._written_at: datetime | None = None
        self._pruned_at: datetime | None = None
        self._thread: SideThread | None = None
        # Held by a write and by the removal: a write never brings a removed row back.
        self._lock = threading.Lock()
        self._removed = False

    def start(self) -> None:
        """Write the row now and refresh it from a thread of its own from then on."""
        if self._thread is None:
            self._ticked_at = self._ticked_at or self.clock()
            self._thread = SideThread(
                "gaffer-registry", self._refresh, retry=REFRESH_EVERY, action="beat_not_registered"
            )
            self._thread.start()

    def ticked(self, now: datetime) -> None:
        """From each tick: note that Beat ticked at ``now``; without a thread, write it
        when :data:`REFRESH_EVERY` seconds have passed since the last write."""
        self._ticked_at = now
        if self._thread is None and self._due(now):
            self.write()

    def _due(self, now: datetime) -> bool:
        written = self._written_at
        # A clock set back (an injected one) counts as due: the row shows the tick.
        return written is None or not 0 <= (now - written).total_seconds() < REFRESH_EVERY

    def _refresh(self) -> float:
        if self._ticked_at != self._written_at:  # nothing new when the tick is stuck
            self.write()
        return REFRESH_EVERY

    def write(self) -> None:
        """Insert the row or move its ``last_tick_at`` to the latest tick; now and then,
        remove the rows of Beats dead for :data:`FORGET_AFTER`."""
        with self._lock:
            if self._removed:
                return
            ticked = self._ticked_at or self.clock()
            if self.started_at is None:
                self.started_at = ticked
            prune = self._pruned_at is None or ticked - self._pruned_at >= PRUNE_EVERY
            models = self.database.models
            with self.database.begin() as conn:
                beats.heartbeat(
                    conn,
                    models,
                    name=self.name,
                    host=self.host,
                    pid=self.pid,
                    started_at=self.started_at,
                    now=ticked,
                )
                gone = beats.forget_before(conn, models, ticked - FORGET_AFTER) if prune else 0
            self._written_at = ticked
            if prune:
                self._pruned_at = ticked
        if gone:
            logger.info(
                "forgot %d Beat(s) that had not ticked for %s",
                gone,
                FORGET_AFTER,
                extra={"action": "beats_forgotten"},
            )

    def stop(self) -> None:
        """Stop refreshing the row (without waiting for a write under way)."""
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.stop()

    def remove(self) -> None:
        """A clean shutdown: stop refreshing and remove the row (one line when the
        database cannot be reached: the row is then removed as a dead Beat's)."""
        self.stop()
        if self._removed:
            return
        # Set first: a write that has not started yet (the thread's first, say) never
        # brings the row back, whether or not this one finds it written.
        self._removed = True
        if not self._lock.acquire(timeout=STOP_WAIT):
            logger.warning(
                "Beat %s left its registry row: a write of it is under way",
                self.name,
                extra={"action": "beat_not_forgotten"},
            )
            return
        try:
            if self.started_at is None:  # never written
                return
            with self.database.begin() as conn:
                beats.forget(conn, self.database.models, self.name)
        except (DBAPIError, DatabaseUnavailable) as exc:
            logger.warning(
                "Beat %s left its registry row: %s",
                self.name,
                one_line(exc),
                extra={"action": "beat_not_forgotten"},
            )
        finally:
            self._lock.release()
