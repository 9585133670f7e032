"""Beat keeps the time partitions of the ledger and the run records made ahead.

On PostgreSQL a fire or a run record goes into the partition of its period
(:mod:`celery_gaffer.store.partitions`); one whose period was not made in time goes into
the default partition, to be moved when its period is made. Beat checks at its first
tick, then every hour (every half period for periods under two hours), and makes the
periods up to :func:`~celery_gaffer.store.partitions.ahead` of now when less than half
of that is left. On SQLite it checks once and never again.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy.exc import OperationalError

from ..exceptions import one_line
from ..store import Database, partitions
from ..store.database import is_lock_timeout

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
