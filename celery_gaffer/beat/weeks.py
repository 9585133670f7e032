"""Beat keeps the weekly partitions of the ledger and the run records made ahead.

On PostgreSQL a fire or a run record goes into the partition of its week
(:mod:`celery_gaffer.store.partitions`); one whose week was not made in time goes into
the default partition, to be moved when its week is made. Beat checks at its first
tick, then every :data:`CHECK_EVERY`, and makes the weeks up to
:data:`~celery_gaffer.store.partitions.AHEAD` ahead when fewer than a week of them are
left. On SQLite it checks once and never again.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy.exc import OperationalError

from ..exceptions import one_line
from ..store import Database, partitions

logger = logging.getLogger("celery_gaffer.scheduler")

CHECK_EVERY = timedelta(hours=1)
#: After a failed attempt (the default partition was busy), the next one.
RETRY_AFTER = timedelta(minutes=1)


@dataclass
class Weeks:
    """When the partitions are next checked, and until when they were made."""

    database: Database
    _check_at: datetime | None = None
    _until: datetime | None = None
    _partitioned: bool = True

    def keep(self, now: datetime) -> None:
        """Make the weeks ahead if it is time to check and fewer than a week are left."""
        if not self._partitioned or (self._check_at is not None and now < self._check_at):
            return
        self._check_at = now + CHECK_EVERY
        if self._until is not None and self._until - now > partitions.WEEK:
            return
        try:
            with self.database.begin() as conn:
                self._until = partitions.covered_until(conn, self.database.models)
                if self._until is None:
                    self._partitioned = False
                    return
                if self._until - now > partitions.WEEK:
                    return
                made = partitions.ensure(conn, self.database.models, now)
                self._until = partitions.covered_until(conn, self.database.models)
        except OperationalError as exc:
            if not partitions.is_lock_timeout(exc):
                raise
            self._check_at = now + RETRY_AFTER
            logger.warning(
                "could not make the weeks ahead of the ledger and run records now (%s); "
                "trying again in a minute",
                one_line(exc),
                extra={"action": "partitions_not_made"},
            )
            return
        for name in made:
            logger.info(
                "made partition %s", name, extra={"action": "partition_made", "partition": name}
            )
