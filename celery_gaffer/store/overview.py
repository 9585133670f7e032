"""What the console's overview reads: schedules counted by state word, fires and runs
counted per minute, and the zones the cron schedules use.

Each is one statement whose cost does not grow with the history: the counts are a
single ``GROUP BY`` over small columns of the schedules table (its state is a few
columns of each row: no JSON is read), the series follow the indexes of the recent rows
(the runs' ``(state, updated_at)``, the ledger's ``created_at``) and are grouped into
per-minute buckets by the database. The functions run inside a transaction the caller
owns.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Connection,
    Integer,
    and_,
    case,
    cast,
    false,
    func,
    literal,
    select,
)

from ..protocol import Health
from .arrays import on_postgresql
from .models import Models, table_of
from .schedule_rows import readable_columns

#: The word of a row whose stored health no longer holds (Beat has not re-checked it).
STALE = "stale"
#: Seconds in one bucket of the series the database groups.
MINUTE = 60


def state_counts(conn: Connection, models: Models, now: datetime) -> dict[tuple[str, bool], int]:
    """How many schedules have each ``(word, stale)``: ``error`` and ``paused`` from the
    row, else the health word Beat stored, with ``stale`` True when its ``check_at`` has
    passed (the word may no longer hold: the caller decides those).

    One ``GROUP BY`` over the ``error``, ``enabled``, ``health`` and ``check_at``
    columns.
    """
    table = table_of(models.Schedule)
    word = case(
        (table.c.error.is_not(None), literal(str(Health.ERROR))),
        (table.c.enabled.is_(false()), literal(str(Health.PAUSED))),
        else_=table.c.health,
    ).label("word")
    stale = case(
        (
            and_(
                table.c.error.is_(None),
                table.c.enabled.is_not(false()),
                table.c.check_at.is_not(None),
                table.c.check_at <= now,
            ),
            literal(1),
        ),
        else_=literal(0),
    ).label("stale")
    stmt = select(word, stale, func.count().label("n")).group_by(word, stale)
    return {(row.word, bool(row.stale)): int(row.n) for row in conn.execute(stmt)}


def stale_rows(
    conn: Connection, models: Models, now: datetime, limit: int
) -> list[Mapping[Any, Any]]:
    """Up to ``limit`` enabled rows without error whose ``check_at`` has passed (through
    its index), every column as :func:`~.schedule_rows.stored` reads them."""
    table = table_of(models.Schedule)
    stmt = (
        select(*readable_columns(table))
        .where(
            table.c.check_at <= now,
            table.c.error.is_(None),
            table.c.enabled.is_not(false()),
        )
        .order_by(table.c.check_at)
        .limit(limit)
    )
    return list(conn.execute(stmt).mappings())


def run_series(
    conn: Connection, models: Models, states: Sequence[str], since: datetime
) -> dict[tuple[str, int], int]:
    """Runs in each of ``states`` last updated at or after ``since``, by ``(state,
    minute)`` (a minute: whole minutes since the Unix epoch). A run in a final state was
    last updated when it ended. Follows the runs' ``(state, updated_at)`` index."""
    runs = table_of(models.JobRun)
    minute = _minute(conn, runs.c.updated_at).label("minute")
    stmt = (
        select(runs.c.state, minute, func.count().label("n"))
        .where(runs.c.state.in_(list(states)), runs.c.updated_at >= since)
        .group_by(runs.c.state, minute)
    )
    return {(row.state, int(row.minute)): int(row.n) for row in conn.execute(stmt)}


def fire_series(conn: Connection, models: Models, since: datetime) -> dict[int, int]:
    """Fires written to the ledger at or after ``since``, by minute (see
    :func:`run_series`). Follows the ledger's ``created_at`` index."""
    fires = table_of(models.Fire)
    minute = _minute(conn, fires.c.created_at).label("minute")
    stmt = (
        select(minute, func.count().label("n")).where(fires.c.created_at >= since).group_by(minute)
    )
    return {int(row.minute): int(row.n) for row in conn.execute(stmt)}


def cron_zones(conn: Connection, models: Models, limit: int | None = None) -> list[str]:
    """The distinct zones of the cron schedules, among the first ``limit`` rows by id
    when ``limit`` is given (a zone is a value inside the JSON definition, which no
    index covers: the read is a scan)."""
    table = table_of(models.Schedule)
    sample = select(
        table.c.schedule["tz"].as_string().label("zone"),
        table.c.schedule["kind"].as_string().label("kind"),
    )
    if limit is not None:
        sample = sample.order_by(table.c.id).limit(limit)
    rows = sample.subquery()
    stmt = select(rows.c.zone).where(rows.c.kind == "cron", rows.c.zone.is_not(None)).distinct()
    return sorted(str(zone) for zone in conn.scalars(stmt))


def minute_of(instant: datetime) -> int:
    """``instant``'s minute as the series count them (whole minutes since the epoch)."""
    return int(instant.astimezone(timezone.utc).timestamp()) // MINUTE


def _minute(conn: Connection, column: Any) -> ColumnElement[Any]:
    if on_postgresql(conn):
        return cast(func.floor(func.extract("epoch", column) / MINUTE), Integer)
    # SQLite keeps instants as text: strftime('%s') reads it as UTC seconds.
    return cast(func.strftime("%s", column), Integer) / MINUTE


__all__ = [
    "STALE",
    "cron_zones",
    "fire_series",
    "minute_of",
    "run_series",
    "stale_rows",
    "state_counts",
]
