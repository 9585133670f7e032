"""The run heartbeat: one thread per process keeping its running rows' ``updated_at`` fresh.

Beat marks a ``running`` row whose heartbeat stopped for a lease TTL ``lost`` (a worker
killed with SIGKILL never records the end of its runs).
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from ..exceptions import one_line
from ..runtime import runtime
from ..store import Database, database_for
from ..store import runs as run_rows

logger = logging.getLogger("celery_gaffer.runs")


class Heartbeat:
    """Refreshes ``updated_at`` of this process's running rows of one database."""

    def __init__(self, database: Database) -> None:
        self.database = database
        self.rows: set[int] = set()
        self.lock = threading.Lock()
        self.thread: threading.Thread | None = None

    def add(self, row_id: int) -> None:
        with self.lock:
            self.rows.add(row_id)
            if self.thread is None:
                self.thread = threading.Thread(
                    target=self._run, name="gaffer-heartbeat", daemon=True
                )
                self.thread.start()

    def discard(self, row_id: int) -> None:
        with self.lock:
            self.rows.discard(row_id)

    def _run(self) -> None:
        interval = self.database.settings.lease_ttl / 3
        while True:
            threading.Event().wait(interval)
            with self.lock:
                rows = list(self.rows)
            if not rows:
                continue
            try:
                with self.database.begin() as conn:
                    run_rows.touch_running(conn, self.database.models, rows)
            except Exception as exc:  # noqa: BLE001 - the next beat tries again
                logger.warning(
                    "run heartbeat failed: %s", one_line(exc), extra={"action": "heartbeat_failed"}
                )


class Heartbeats(dict[int, Heartbeat]):
    """This process's heartbeats, one per app (by id)."""


def heartbeat_for(app: Any) -> Heartbeat:
    """The heartbeat of ``app`` in this process (a forked child starts its own thread)."""
    beats = runtime().part("heartbeats", Heartbeats)
    beat = beats.get(id(app))
    if beat is None:
        with runtime().lock:
            beat = beats.get(id(app))
            if beat is None:
                beat = beats[id(app)] = Heartbeat(database_for(app))
    return beat
