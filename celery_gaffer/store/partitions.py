"""Time partitions of the ledger and of the run records on PostgreSQL.

On PostgreSQL (since migration 0004) ``{prefix}fires`` is partitioned by range of
``nominal_at`` and ``{prefix}job_runs`` by range of ``created_at``, so that retention can
drop a period of old rows as one catalogue change instead of deleting them row by row
(which writes every row to the WAL, and leaves the dead rows to autovacuum). A period
is ``gaffer_partition_interval`` long (a week by default; periods start at multiples of
it from Monday 1970-01-05 00:00 UTC, so a week starts on a Monday and a day at
midnight). Each table has:

* ``{table}_pYYYYMMDD`` (``_pYYYYMMDDHHMM`` for periods shorter than a day): the rows
  of one period;
* ``{table}_history``: the rows from before the migration, if there were any;
* ``{table}_default``: a row no period covers (its period was not made in time); moved
  into its period when that is made.

:func:`ensure` makes the periods up to :func:`ahead` of now: ``gaffer migrate``, Beat (at
start, then whenever less than half of that is left) and ``gaffer cleanup`` call it. A
new interval applies to the periods made from then on. :func:`drop_if_expired` drops a
partition only when the batched ``DELETE`` of :mod:`.retention` would delete every row
in it, checked under the lock that drops it; rows to keep (a pending fire, a running or
recent run) keep their partition, and its old rows are deleted in batches. Which rows go
is the same either way.

Partition bounds are DDL, which takes no bound parameters: they are rendered from
datetimes this module computes, never from input.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

from sqlalchemy import (
    ColumnElement,
    Connection,
    Table,
    and_,
    column,
    delete,
    exists,
    false,
    func,
    insert,
    inspect,
    or_,
    select,
    table,
    text,
)
from sqlalchemy.exc import DBAPIError, OperationalError

from .database import is_lock_timeout
from .models import Models, table_of

logger = logging.getLogger("celery_gaffer.store")

WEEK = timedelta(days=7)
#: The default period (``gaffer_partition_interval``).
DEFAULT_INTERVAL = WEEK
#: A Monday, 00:00 UTC: periods start at multiples of the interval from here.
_MONDAY = datetime(1970, 1, 5, tzinfo=timezone.utc)
#: Most one drop waits for its table's lock per try (a query waiting behind it waits
#: as long), and how many times it tries before leaving the partition to DELETE.
DROP_LOCK_TIMEOUT_MS = 50
DROP_TRIES = 40
#: Most a new period waits for the default partition's lock before it is left for later.
ENSURE_LOCK_TIMEOUT_MS = 2000


@dataclass(frozen=True, slots=True)
class Partitioned:
    """A partitioned table and the column it is partitioned by."""

    table: Table
    key: str

    @property
    def name(self) -> str:
        return self.table.name


@dataclass(frozen=True, slots=True)
class Partition:
    """One partition: ``lower <= key < upper`` (``lower`` None: no lower bound; both None:
    the default partition)."""

    name: str
    lower: datetime | None
    upper: datetime | None

    @property
    def is_default(self) -> bool:
        return self.lower is None and self.upper is None


def partitioned(models: Models) -> tuple[Partitioned, Partitioned]:
    """The tables that are partitioned on PostgreSQL: the ledger, the run records."""
    return (
        Partitioned(table_of(models.Fire), "nominal_at"),
        Partitioned(table_of(models.JobRun), "created_at"),
    )


def ahead(interval: timedelta) -> timedelta:
    """How far ahead of now the periods are made: two of them, and at least six hours."""
    return max(2 * interval, timedelta(hours=6))


def period_start(at: datetime, interval: timedelta) -> datetime:
    """The start of the period that holds ``at``."""
    return _MONDAY + interval * ((at - _MONDAY) // interval)


def period_name(parent: str, start: datetime, interval: timedelta) -> str:
    """``{parent}_pYYYYMMDD``, with the time too for periods shorter than a day."""
    if interval % timedelta(days=1):
        return f"{parent}_p{start:%Y%m%d%H%M}"
    return f"{parent}_p{start:%Y%m%d}"


def periods(since: datetime, until: datetime, interval: timedelta) -> list[datetime]:
    """The starts of the periods that hold a moment of ``[since, until]``."""
    start, last = period_start(since, interval), period_start(until, interval)
    found = []
    while start <= last:
        found.append(start)
        start += interval
    return found


_BOUND = re.compile(r"FROM \((.+?)\) TO \((.+?)\)")


def parse_bound(expression: str) -> tuple[datetime | None, datetime | None]:
    """``(lower, upper)`` of ``pg_get_expr(relpartbound)`` rendered in UTC (``(None,
    None)``: the default partition; ``None`` for ``MINVALUE`` / ``MAXVALUE``)."""
    if expression.strip() == "DEFAULT":
        return None, None
    found = _BOUND.search(expression)
    if found is None:
        raise ValueError(f"unexpected partition bound {expression!r}")
    return _bound_value(found.group(1)), _bound_value(found.group(2))


def _bound_value(value: str) -> datetime | None:
    if value in ("MINVALUE", "MAXVALUE"):
        return None
    stamp = value.strip("'").replace(" ", "T")
    if re.search(r"[+-]\d\d$", stamp):
        stamp += ":00"
    return datetime.fromisoformat(stamp).astimezone(timezone.utc)


def is_partitioned(conn: Connection, parent: str) -> bool:
    """Whether ``parent`` is a partitioned table (always False on SQLite)."""
    if conn.dialect.name != "postgresql":
        return False
    kind = conn.execute(
        text("SELECT relkind FROM pg_class WHERE oid = to_regclass(:name)"), {"name": parent}
    ).scalar()
    return bool(kind == "p")


def partitions(conn: Connection, parent: str) -> list[Partition]:
    """The partitions of ``parent``, the default one last, the others by lower bound."""
    conn.execute(text("SELECT set_config('TimeZone', 'UTC', true)"))
    rows = conn.execute(
        text(
            "SELECT c.relname, pg_get_expr(c.relpartbound, c.oid) FROM pg_inherits i "
            "JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = to_regclass(:name)"
        ),
        {"name": parent},
    ).all()
    # A partition dropped meanwhile (another cleanup) may show with no bound: gone.
    found = [Partition(name, *parse_bound(bound)) for name, bound in rows if bound is not None]
    far_past = datetime.min.replace(tzinfo=timezone.utc)
    return sorted(found, key=lambda p: (p.is_default, p.lower or far_past))


def covered_until(conn: Connection, models: Models) -> datetime | None:
    """Until when every partitioned table has its periods (None: not partitioned)."""
    ends = []
    for target in partitioned(models):
        if not is_partitioned(conn, target.name):
            return None
        uppers = [p.upper for p in partitions(conn, target.name) if p.upper is not None]
        ends.append(max(uppers, default=datetime.min.replace(tzinfo=timezone.utc)))
    return min(ends)


def ensure(
    conn: Connection,
    models: Models,
    now: datetime,
    interval: timedelta = DEFAULT_INTERVAL,
    *,
    since: datetime | None = None,
) -> list[str]:
    """Make the missing periods from ``since`` (default: the current one) to
    :func:`ahead` of ``now``, in the caller's transaction; the names made. A period that
    overlaps a partition there already (the history, a period of another interval) is
    not made. Rows of a new period found in the default partition are moved into it.
    Nothing on a table that is not partitioned."""
    made: list[str] = []
    for target in partitioned(models):
        if not is_partitioned(conn, target.name):
            continue
        # Two callers at once (Beat and cleanup): one makes the period, the other sees it.
        conn.execute(text("SELECT pg_advisory_xact_lock(hashtext(:name))"), {"name": target.name})
        existing = partitions(conn, target.name)
        for start in periods(since or now, now + ahead(interval), interval):
            end = start + interval
            if any(_overlaps(p, start, end) for p in existing):
                continue
            default = next((p.name for p in existing if p.is_default), None)
            name = period_name(target.name, start, interval)
            _make_period(conn, target, name, start, end, default)
            made.append(name)
    return made


def _overlaps(partition: Partition, start: datetime, end: datetime) -> bool:
    if partition.is_default:
        return False
    below = partition.lower is None or partition.lower < end
    above = partition.upper is None or partition.upper > start
    return below and above


def _make_period(
    conn: Connection,
    target: Partitioned,
    name: str,
    start: datetime,
    end: datetime,
    default: str | None,
) -> None:
    """One period: a table like the parent, the default partition's rows of that period
    moved into it, attached (which builds its indexes). Attaching takes the parent's
    SHARE UPDATE EXCLUSIVE lock, which reads and writes do not wait for; the default
    partition is locked for the move, briefly."""
    quote = conn.dialect.identifier_preparer.quote
    conn.execute(text(f"SET LOCAL lock_timeout = {ENSURE_LOCK_TIMEOUT_MS}"))
    conn.execute(text(f"CREATE TABLE {quote(name)} (LIKE {quote(target.name)} INCLUDING DEFAULTS)"))
    if default is not None:
        conn.execute(text(f"LOCK TABLE {quote(default)} IN ACCESS EXCLUSIVE MODE"))
        source = partition_table(target, default)
        within = and_(source.c[target.key] >= start, source.c[target.key] < end)
        # The columns the table has now (a migration before a later one's columns runs
        # with today's models).
        present = {c["name"] for c in inspect(conn).get_columns(default)}
        names = [c.name for c in target.table.columns if c.name in present]
        moving = select(*(source.c[column] for column in names)).where(within)
        conn.execute(insert(partition_table(target, name)).from_select(names, moving))
        conn.execute(delete(source).where(within))
    conn.execute(
        text(
            f"ALTER TABLE {quote(target.name)} ATTACH PARTITION {quote(name)} "
            f"FOR VALUES FROM ('{start.isoformat()}') TO ('{end.isoformat()}')"
        )
    )
    conn.execute(text("SET LOCAL lock_timeout = 0"))


#: For each partitioned table, given the partition: queries that find a row to keep.
KeptProbes = Callable[[Table], Sequence[ColumnElement[bool]]]


def partition_table(target: Partitioned, name: str) -> Table:
    """``target``'s columns under a partition's name, for statements on that partition."""
    return table(name, *(column(c.name, c.type) for c in target.table.columns))  # type: ignore[return-value]


def expired_candidates(conn: Connection, target: Partitioned, before: datetime) -> list[Partition]:
    """The bounded partitions that end by ``before``: those whose rows may all be past
    retention (each is checked before it is dropped)."""
    return [
        p
        for p in partitions(conn, target.name)
        if not p.is_default and p.upper is not None and p.upper <= before
    ]


def drop_if_expired(
    conn: Connection,
    target: Partitioned,
    partition: Partition,
    kept: KeptProbes,
    locked_kept: KeptProbes,
) -> int | None:
    """In the caller's transaction: drop ``partition`` if no row of it is to be kept; the
    rows dropped (0: another cleanup dropped it first; :func:`is_gone` tells the error
    of a statement that found it gone), or None (a row is to be kept: nothing dropped).

    The rows are counted, and ``kept`` checked, in one scan; then ``target`` is locked
    (its parent, so that no statement plans against the partition meanwhile) and
    ``locked_kept`` (quick, through indexes: what a write since the scan can have
    changed) is checked under the lock, which is held only for that and the drop. A lock
    not had within :data:`DROP_LOCK_TIMEOUT_MS` raises OperationalError (see
    :func:`retry_on_lock_timeout`).
    """
    quote = conn.dialect.identifier_preparer.quote
    part = partition_table(target, partition.name)
    probes = kept(part)
    keep_any = func.coalesce(func.bool_or(or_(*probes)), False) if probes else false()
    rows, keep = conn.execute(select(func.count(), keep_any).select_from(part)).one()
    if keep:
        return None
    conn.execute(text(f"SET LOCAL lock_timeout = {DROP_LOCK_TIMEOUT_MS}"))
    conn.execute(text(f"LOCK TABLE {quote(target.name)} IN ACCESS EXCLUSIVE MODE"))
    if not _exists(conn, partition.name):
        return 0
    if any(conn.execute(select(exists().where(probe))).scalar() for probe in locked_kept(part)):
        return None
    conn.execute(text(f"DROP TABLE {quote(partition.name)}"))
    return int(rows)


def is_gone(exc: DBAPIError) -> bool:
    """Whether a statement failed because its table no longer exists (42P01)."""
    return getattr(exc.orig, "sqlstate", None) == "42P01"


def _exists(conn: Connection, name: str) -> bool:
    found = conn.execute(text("SELECT to_regclass(:name) IS NOT NULL"), {"name": name})
    return bool(found.scalar())


def retry_on_lock_timeout(attempt: Callable[[], int | None], what: str) -> int | None:
    """``attempt()`` (a drop in a transaction of its own) again after a lock timeout, up to
    :data:`DROP_TRIES` times; None (nothing dropped) if it never got the lock."""
    for _ in range(DROP_TRIES):
        try:
            return attempt()
        except OperationalError as exc:
            if not is_lock_timeout(exc):
                raise
            time.sleep(0.25)
    logger.warning(
        "retention: could not lock %s to drop it (busy %d times); its old rows are deleted "
        "in batches instead",
        what,
        DROP_TRIES,
        extra={"action": "partition_drop_busy", "partition": what},
    )
    return None
