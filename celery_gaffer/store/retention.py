"""Retention: delete old run records, ledger rows and completed keys in bounded batches.

On PostgreSQL the partitions of the ledger and of the run records whose every row is
past retention are dropped whole first (:mod:`.partitions`); what is left is deleted in
batches, as on SQLite. The rows that go are the same either way.
"""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import ColumnElement, Table, and_, delete, select
from sqlalchemy.exc import OperationalError, ProgrammingError

from ..exceptions import GafferError, one_line
from ..protocol import FireState, RunState
from . import partitions
from .alerts import expired_conditions
from .database import Database, is_lock_timeout
from .models import table_of

logger = logging.getLogger("celery_gaffer.store")

BATCH = 5000


@dataclass(frozen=True, slots=True)
class CleanupReport:
    runs: int
    fires: int
    keys: int
    alerts: int = 0


def cleanup(database: Database, now: datetime, *, batch: int = BATCH) -> CleanupReport:
    """Delete what is older than ``gaffer_run_retention`` / ``_ledger_`` / ``_key_retention``
    (alerts sent or given up: as old as the ledger's retention).

    Each batch is one statement in its own short transaction, so a large backlog never
    holds long locks. Pending fires are kept whatever their age (they are still to be
    published).
    """
    if batch < 1:
        raise GafferError(f"batch: must be a positive number of rows, got {batch!r}", field="batch")
    settings = database.settings
    models = database.models
    runs, fires, keys, alerts = (
        table_of(models.JobRun),
        table_of(models.Fire),
        table_of(models.IdempotencyKey),
        table_of(models.Alert),
    )
    run_cutoff = now - timedelta(seconds=settings.run_retention)
    fire_cutoff = now - timedelta(seconds=settings.ledger_retention)
    dropped = _drop_expired_partitions(database, now, run_cutoff, fire_cutoff)
    counts = []
    for table, key_column, conditions in (
        (
            runs,
            runs.c.id,
            (
                runs.c.state != RunState.RUNNING,
                runs.c.updated_at < run_cutoff,
            ),
        ),
        (
            fires,
            fires.c.id,
            (
                fires.c.state != FireState.PENDING,
                fires.c.created_at < fire_cutoff,
            ),
        ),
        (
            keys,
            keys.c.key,
            (keys.c.completed_at < now - timedelta(seconds=settings.key_retention),),
        ),
        (
            alerts,
            alerts.c.id,
            expired_conditions(models, now - timedelta(seconds=settings.ledger_retention)),
        ),
    ):
        counts.append(_delete_in_batches(database, table, key_column, conditions, batch))
    counts[0] += dropped.get(runs.name, 0)
    counts[1] += dropped.get(fires.name, 0)
    return CleanupReport(*counts)


def _drop_expired_partitions(
    database: Database, now: datetime, run_cutoff: datetime, fire_cutoff: datetime
) -> dict[str, int]:
    """Make the periods ahead, then drop each period (and the history) whose every row
    is past retention; the rows dropped, by table. Nothing where the tables are not
    partitioned (SQLite)."""
    if database.dialect != "postgresql":
        return {}
    models = database.models
    try:
        with database.begin() as conn:
            partitions.ensure(conn, models, now, database.partition_interval)
    except OperationalError as exc:
        if not is_lock_timeout(exc):
            raise
        # A busy default partition: the periods are made on a later call.
        logger.warning(
            "retention: could not make the partitions ahead now (%s); Beat or the next "
            "cleanup makes them",
            one_line(exc),
            extra={"action": "partitions_not_made"},
        )
    fires, runs = partitions.partitioned(models)
    checks = {
        fires.name: (fire_cutoff, _fires_kept(fire_cutoff), _fires_kept(fire_cutoff)),
        runs.name: (run_cutoff, _runs_kept(run_cutoff), _runs_kept_indexed(run_cutoff)),
    }
    dropped: dict[str, int] = {}
    for target in (runs, fires):
        cutoff, kept, locked_kept = checks[target.name]
        with database.read() as conn:
            if not partitions.is_partitioned(conn, target.name):
                continue
            candidates = partitions.expired_candidates(conn, target, cutoff)
        for partition in candidates:
            attempt = functools.partial(_drop_one, database, target, partition, kept, locked_kept)
            rows = partitions.retry_on_lock_timeout(attempt, partition.name)
            if rows is not None:
                dropped[target.name] = dropped.get(target.name, 0) + rows
                logger.info(
                    "retention: dropped %s (%d rows, all past retention)",
                    partition.name,
                    rows,
                    extra={"action": "partition_dropped", "partition": partition.name},
                )
    return dropped


def _drop_one(
    database: Database,
    target: partitions.Partitioned,
    partition: partitions.Partition,
    kept: partitions.KeptProbes,
    locked_kept: partitions.KeptProbes,
) -> int | None:
    try:
        with database.begin() as conn:
            return partitions.drop_if_expired(conn, target, partition, kept, locked_kept)
    except ProgrammingError as exc:
        if partitions.is_gone(exc):
            return 0  # another cleanup dropped it while this one read it
        raise


def _fires_kept(cutoff: datetime) -> partitions.KeptProbes:
    """What keeps a ledger partition: a pending fire, or one created since ``cutoff``
    (each an index lookup)."""

    def probes(part: Table) -> list[ColumnElement[bool]]:
        return [part.c.state == FireState.PENDING, part.c.created_at >= cutoff]

    return probes


def _runs_kept(cutoff: datetime) -> partitions.KeptProbes:
    """What keeps a run partition: a running run, or one updated since ``cutoff``."""

    def probes(part: Table) -> list[ColumnElement[bool]]:
        return [part.c.state == RunState.RUNNING, part.c.updated_at >= cutoff]

    return probes


def _runs_kept_indexed(cutoff: datetime) -> partitions.KeptProbes:
    """:func:`_runs_kept` through the ``(state, updated_at)`` index, state by state: what
    a write can change between the first check and the lock."""

    def probes(part: Table) -> list[ColumnElement[bool]]:
        return [
            part.c.state == RunState.RUNNING,
            and_(part.c.state.in_(list(RunState)), part.c.updated_at >= cutoff),
        ]

    return probes


def _delete_in_batches(
    database: Database, table: Any, key_column: Any, conditions: Any, batch: int
) -> int:
    """Delete the matching rows, ``batch`` at a time: one ``DELETE ... WHERE key IN
    (SELECT key ... LIMIT batch)`` each (the keys never travel to the client).

    A short batch ends the loop. Two cleanups at once on PostgreSQL may pick the same
    rows; the one that waited finds them gone, comes back short and stops, while the
    other, whose batch was whole, goes on to the end: every old row still goes. (``FOR
    UPDATE SKIP LOCKED`` would keep them apart, but locking each row before deleting it
    writes it to the WAL twice: 189,000 against 233,000 rows/s, and Beat's tick p99 1.2x
    against 0.86x, in ``benchmarks/cleanup.py --rows 3000000``.)
    """
    deleted = 0
    chosen = select(key_column).where(*conditions).limit(batch)
    while True:
        with database.begin() as conn:
            count = conn.execute(delete(table).where(key_column.in_(chosen))).rowcount
        deleted += count
        if count < batch:
            return deleted


def empty_tables(database: Database) -> None:
    """Delete every row of every Gaffer table, in one transaction (test suites: see
    ``celery_gaffer.contrib.django.testing``)."""
    with database.begin() as conn:
        for table in reversed(database.models.metadata.sorted_tables):
            conn.execute(delete(table))
