"""Beat keeps the time partitions of the ledger and the run records made ahead.

On PostgreSQL a fire or a run record goes into the partition of its period
(:mod:`celery_gaffer.store.partitions`); one whose period was not made in time goes into
the default partition, to be moved when its period is made. Beat checks at its first
tick, then every hour (every half period for periods under two hours), and makes the
periods up to :func:`~celery_gaffer.store.partitions.ahead` of now when less than half
of that is left. On SQLite it checks once and never again.

Once :meth:`PartitionKeeper.start` ran, the checks are made by a thread of their own
(:mod:`.side`): the tick never waits for a check. Making a period whose rows already
went into the default partition (it was not made in time: Beat was down longer than the
periods made ahead) moves them under the default partition's exclusive lock, which the
tick's statements on the ledger then wait for until the move commits, as long as there
are rows to move; with the periods made ahead, the default partition is empty and the
move takes no time.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy.exc import OperationalError

from ..exceptions import one_line
from ..store import Database, partitions
from ..store.database import is_lock_timeout
from .side import SideThread

logger = logging.getLogger("celery_gaffer.scheduler")

CHECK_EVERY = timedelta(hours=1)
#: After a failed attempt (the default partition was busy), the next one.
RETRY_AFTER = timedelta(minutes=1)


@dataclass
class PartitionKeeper:
    """When the partitions are next checked, and until when they were made."""

    database: Database
    _check_at: datetime | None = None
    _until: datetime | None = None
    _partitioned: bool = True
    #: Checks from a thread of its own (:meth:`start`); None: from the tick.
    _thread: SideThread | None = None

    def start(self, clock: Callable[[], datetime]) -> None:
        """Check from a thread of its own from now on: :meth:`on_tick` does nothing."""
        if self._thread is None:

            def job() -> float:
                now = clock()
                self.keep(now)
                if not self._partitioned or self._check_at is None:
                    return CHECK_EVERY.total_seconds()
                return (self._check_at - now).total_seconds()

            self._thread = SideThread(
                "gaffer-partitions",
                job,
                retry=RETRY_AFTER.total_seconds(),
                action="partitions_not_made",
            )
            self._thread.start()

    def stop(self) -> None:
        """Stop the thread without waiting (a period being made is rolled back with the
        process, and made at the next check)."""
        if self._thread is not None:
            self._thread.stop()
            self._thread = None

    def on_tick(self, now: datetime) -> None:
        """:meth:`keep`, unless a thread of its own does (:meth:`start`)."""
        if self._thread is None:
            self.keep(now)

    def keep(self, now: datetime) -> None:
        """Make the periods ahead if it is time to check and too few are left."""
        if not self._partitioned or (self._check_at is not None and now < self._check_at):
            return
        interval = self.database.partition_interval
        self._check_at = now + min(CHECK_EVERY, interval / 2)
        enough = partitions.ahead(interval) / 2
        if self._until is not None and self._until - now > enough:
            return
        models = self.database.models
        try:
            with self.database.begin() as conn:
                self._until = partitions.covered_until(conn, models)
                if self._until is None:
                    self._partitioned = False
                    return
                if self._until - now > enough:
                    return
                made = partitions.ensure(conn, models, now, interval)
                self._until = partitions.covered_until(conn, models)
        except OperationalError as exc:
            if not is_lock_timeout(exc):
                raise
            self._check_at = now + RETRY_AFTER
            logger.warning(
                "could not make the partitions ahead of the ledger and run records now "
                "(%s); trying again in a minute",
                one_line(exc),
                extra={"action": "partitions_not_made"},
            )
            return
        for name in made:
            logger.info(
                "made partition %s", name, extra={"action": "partition_made", "partition": name}
            )
