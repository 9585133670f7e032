"""The schedules table: what a tick claims and advances, health facts, and row edits.

These functions run inside a transaction the caller owns. A tick reads only the rows
whose ``next_fire_at`` (or ``check_at``) has passed, through their indexes, never a scan
of all schedules.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import (
    Connection,
    Integer,
    Text,
    bindparam,
    case,
    cast,
    delete,
    func,
    insert,
    select,
    update,
)

from ..protocol import FAILURE_STATES, FireState, Overlap, RunState
from .arrays import matches, update_many
from .dbclock import db_now
from .models import Models, table_of
from .prebuilt import prebuilt
from .schedule_rows import StoredSchedule, decode_json, readable_columns, stored

# Rows per statement when a list of ids or parameters is sent to the database.
CHUNK = 1000


@dataclass(frozen=True, slots=True)
class DueSchedule:
    """A schedule row whose ``next_fire_at`` has passed, as read by a tick."""

    id: int
    name: str
    task: str
    schedule: Any
    args: Any
    kwargs: Any
    options: Any
    catchup: str
    starting_deadline: float | None
    overlap: str
    watermark_at: datetime
    grace: float | None = None
    error: str | None = None
    start_at: datetime | None = None
    end_at: datetime | None = None
    max_runs: int | None = None
    fired_count: int = 0
    ping_url: str | None = None
    skip_on: Any = None
    on_skip: str | None = None


def claim_due_schedules(
    conn: Connection, models: Models, now: datetime, limit: int
) -> list[DueSchedule]:
    """Lock and return up to ``limit`` schedules with ``next_fire_at <= now``, oldest first.

    On PostgreSQL rows another Beat has locked are skipped (``SKIP LOCKED``); on SQLite
    the caller's ``BEGIN IMMEDIATE`` already excludes every other writer. JSON columns
    are read as text so that one undecodable row cannot break the whole batch.
    """
    stmt = _due_statement(models, conn.dialect.name == "postgresql")
    rows = conn.execute(stmt, {"now": now, "limit": limit}).all()
    return [DueSchedule(*row) for row in rows]


def _due_statement(models: Models, postgresql: bool) -> Any:
    """The due schedules' ``SELECT`` (parameters ``now``, ``limit``), built once."""

    def build() -> Any:
        s = models.Schedule
        stmt = (
            select(
                s.id,
                s.name,
                s.task,
                # CAST, not type_coerce: psycopg would decode the JSON of every row,
                # where a tick decodes only the texts it has not seen (plan.usable_row).
                cast(s.schedule, Text),
                cast(s.args, Text),
                cast(s.kwargs, Text),
                cast(s.options, Text),
                s.catchup,
                s.starting_deadline,
                s.overlap,
                s.watermark_at,
                s.grace,
                s.error,
                s.start_at,
                s.end_at,
                s.max_runs,
                s.fired_count,
                s.ping_url,
                cast(s.skip_on, Text),
                s.on_skip,
            )
            .where(s.next_fire_at <= bindparam("now", type_=s.next_fire_at.type))
            .order_by(s.next_fire_at)
            .limit(bindparam("limit", type_=Integer()))
        )
        if postgresql:
            stmt = stmt.with_for_update(skip_locked=True, of=table_of(s))
        return stmt

    return prebuilt(("due-schedules", models.prefix, postgresql), build)


def advance_schedules(
    conn: Connection,
    models: Models,
    changes: Sequence[dict[str, Any]],
    *,
    later: list[tuple[Any, dict[str, Any]]] | None = None,
) -> None:
    """Set ``watermark_at`` / ``next_fire_at`` (and ``error``) for many schedules at once,
    and add the fires each sent to its ``fired_count``.

    Each change is ``{"id", "watermark_at", "next_fire_at", "error", "sent"}``. ``later``:
    on PostgreSQL the statements are appended to it rather than run (see
    :func:`~.arrays.update_many`).
    """
    table = table_of(models.Schedule)
    update_many(
        conn,
        table,
        "id",
        _ADVANCE_COLUMNS,
        changes,
        lambda value: {
            "watermark_at": value("watermark_at"),
            "next_fire_at": value("next_fire_at"),
            "error": value("error"),
            "fired_count": table.c.fired_count + value("sent"),
        },
        name="advance-schedules",
        later=later,
    )


_ADVANCE_COLUMNS = (
    ("id", "bigint"),
    ("watermark_at", "datetime"),
    ("next_fire_at", "datetime"),
    ("error", "text"),
    ("sent", "int"),
)


@dataclass(frozen=True, slots=True)
class Probe:
    """When each kind of Beat work is next due (None: never)."""

    next_fire_at: datetime | None
    check_at: datetime | None
    #: The earliest ``publish_after`` of a pending fire.
    publish_after: datetime | None
    confirm_after: datetime | None
    #: When the earliest pending fire never claimed (a jittered send) is due to be
    #: claimed: ``claim_ahead`` before its ``publish_after`` (None: not sooner than
    #: ``publish_after``).
    claim_at: datetime | None = None

    def due(self, now: datetime, lead: timedelta = timedelta(0)) -> tuple[bool, bool, bool, bool]:
        """(fires, health checks, pending publishes, delivery confirmations) due now;
        fires are due ``lead`` before their time (decided ahead, sent at their time)."""
        fires, checks, publish, confirm, claim = (
            when is not None and when <= now for when in self._times(lead)
        )
        return fires, checks, publish or claim, confirm

    def earliest(self, lead: timedelta = timedelta(0)) -> datetime | None:
        times = [t for t in self._times(lead) if t is not None]
        return min(times) if times else None

    def _times(self, lead: timedelta) -> tuple[datetime | None, ...]:
        return (
            None if self.next_fire_at is None else self.next_fire_at - lead,
            self.check_at,
            self.publish_after,
            self.confirm_after,
            self.claim_at,
        )


def probe(
    conn: Connection, models: Models, *, confirm: bool, claim_ahead: timedelta = timedelta(0)
) -> Probe:
    """Index lookups: when fires, checks and publishes are next due.

    One statement; a second, over a bounded index range, when a pending fire exists and
    ``claim_ahead`` is set: the earliest fire never claimed within ``claim_ahead`` of the
    earliest pending one (a later one cannot be due sooner).
    """
    s, f = models.Schedule, models.Fire
    pending = f.state == FireState.PENDING
    columns: list[Any] = [
        select(func.min(s.next_fire_at)).scalar_subquery(),
        select(func.min(s.check_at)).scalar_subquery(),
        select(func.min(f.publish_after)).where(pending).scalar_subquery(),
    ]
    if confirm:
        columns.append(
            select(func.min(f.publish_after)).where(f.state == FireState.SENT).scalar_subquery()
        )
    row = conn.execute(select(*columns)).one()
    earliest = row[2]
    claim_at = None
    if earliest is not None and claim_ahead:
        unclaimed = conn.execute(
            select(func.min(f.publish_after)).where(
                pending, f.publish_after < earliest + claim_ahead, f.publish_count == 0
            )
        ).scalar()
        claim_at = None if unclaimed is None else unclaimed - claim_ahead
    return Probe(row[0], row[1], earliest, row[3] if confirm else None, claim_at)


@dataclass(frozen=True, slots=True)
class Payload:
    """What a fire of a schedule sends: the task, its arguments and Celery options."""

    task: str
    args: list[Any]
    kwargs: dict[str, Any]
    options: dict[str, Any]
    overlap: str = Overlap.ALLOW
    #: Why the schedule cannot fire now (its fires wait, pending, until it can).
    error: str | None = None
    #: The schedule's ping URL (healthchecks.io style), if any.
    ping_url: str | None = None
    #: The schedule's jitter in seconds and catch-up policy (for a fire's trace span).
    jitter: float | None = None
    catchup: str | None = None


def load_payloads(conn: Connection, models: Models, names: Iterable[str]) -> dict[str, Payload]:
    """The payloads of the named schedules that exist and decode (others are left out)."""
    s = models.Schedule
    wanted = sorted(set(names))
    payloads: dict[str, Payload] = {}
    for start in range(0, len(wanted), CHUNK):
        stmt = select(
            s.name,
            s.task,
            # CAST: psycopg would decode the JSON itself, without a depth bound.
            cast(s.args, Text),
            cast(s.kwargs, Text),
            cast(s.options, Text),
            s.overlap,
            s.error,
            s.ping_url,
            cast(s.schedule, Text),
            s.catchup,
        ).where(matches(conn, s.name, wanted[start : start + CHUNK], "str"))
        for (
            name,
            task,
            args,
            kwargs,
            options,
            overlap,
            error,
            ping_url,
            when,
            catchup,
        ) in conn.execute(stmt):
            try:
                payloads[name] = Payload(
                    task,
                    list(decode_json(args, "args")),
                    dict(decode_json(kwargs, "kwargs")),
                    dict(decode_json(options, "options")),
                    overlap,
                    error,
                    ping_url,
                    _jitter(when),
                    catchup,
                )
            except (TypeError, ValueError):
                continue
    return payloads


def _jitter(schedule: str | None) -> float | None:
    """The jitter of a stored schedule (None: unknown)."""
    try:
        jitter = decode_json(schedule or "{}", "schedule").get("jitter")
    except (AttributeError, TypeError, ValueError):
        return None
    return float(jitter) if isinstance(jitter, (int, float)) else None


def mark_errors(
    conn: Connection, models: Models, errors: dict[str, str], recheck_at: datetime | None
) -> None:
    """Put the named schedules in ``error`` with their reasons; Beat loads them again at
    ``recheck_at`` (None: never, until they are edited) to see whether the cause is gone."""
    table = table_of(models.Schedule)
    for name, reason in errors.items():
        # A paused schedule stays paused: it is never made due by an error.
        next_fire_at: Any = None
        if recheck_at is not None:
            when = bindparam(None, recheck_at, type_=table.c.next_fire_at.type)
            next_fire_at = case((table.c.enabled.is_(True), when), else_=None)
        conn.execute(
            update(table)
            .where(table.c.name == name)
            .values(error=reason, next_fire_at=next_fire_at, check_at=db_now())
        )


def request_checks(conn: Connection, models: Models, names: Iterable[str]) -> None:
    """Ask Beat to evaluate the named schedules' health on its next tick."""
    wanted = list(names)
    if wanted:
        table = table_of(models.Schedule)
        conn.execute(update(table).where(table.c.name.in_(wanted)).values(check_at=db_now()))


def update_schedule_facts(
    conn: Connection, models: Models, schedule: str, state: str, nominal: datetime | None
) -> None:
    """Fold a finished run into its schedule's health facts and ask for a re-check."""
    table = table_of(models.Schedule)
    values: dict[str, Any] = {"check_at": db_now()}
    if state == RunState.SUCCEEDED:
        values["consecutive_failures"] = 0
        values["last_success_at"] = db_now()
        if nominal is not None:
            current = table.c.last_success_nominal_at
            values["last_success_nominal_at"] = case(
                (current.is_(None), nominal), (current < nominal, nominal), else_=current
            )
    elif state in FAILURE_STATES:
        values["consecutive_failures"] = table.c.consecutive_failures + 1
    else:
        return
    conn.execute(update(table).where(table.c.name == schedule).values(**values))


# -- health ---------------------------------------------------------------------------


# -- rows written through ScheduleStore ------------------------------------------------


def read_schedule(
    conn: Connection, models: Models, name: str, *, lock: bool = False
) -> StoredSchedule | None:
    """The schedule ``name`` (``lock``: its row locked until the transaction ends)."""
    table = table_of(models.Schedule)
    stmt = select(*readable_columns(table)).where(table.c.name == name)
    if lock:
        stmt = stmt.with_for_update()
    row = conn.execute(stmt).mappings().one_or_none()
    return None if row is None else stored(row)


def list_schedules(
    conn: Connection, models: Models, *, limit: int | None = None
) -> list[StoredSchedule]:
    """Schedules ordered by name (at most ``limit``)."""
    table = table_of(models.Schedule)
    stmt = select(*readable_columns(table)).order_by(table.c.name).limit(limit)
    return [stored(row) for row in conn.execute(stmt).mappings()]


def insert_schedules(conn: Connection, models: Models, rows: Sequence[dict[str, Any]]) -> None:
    """Insert schedule rows (one executemany); a repeated name raises IntegrityError."""
    if rows:
        conn.execute(insert(table_of(models.Schedule)), list(rows))


def update_schedule(conn: Connection, models: Models, name: str, values: dict[str, Any]) -> None:
    table = table_of(models.Schedule)
    conn.execute(update(table).where(table.c.name == name).values(**values))


def delete_schedules(conn: Connection, models: Models, names: Iterable[str]) -> int:
    """Delete the named schedules; how many there were."""
    table = table_of(models.Schedule)
    wanted = list(names)
    if not wanted:
        return 0
    return int(conn.execute(delete(table).where(table.c.name.in_(wanted))).rowcount)


def has_due_resumes(conn: Connection, models: Models, now: datetime) -> bool:
    """Whether a paused schedule's ``paused_until`` has passed (one indexed read)."""
    table = table_of(models.Schedule)
    stmt = (
        select(table.c.id).where(table.c.paused_until <= now, table.c.enabled.is_(False)).limit(1)
    )
    return conn.execute(stmt).first() is not None


def lock_due_resumes(
    conn: Connection, models: Models, now: datetime, limit: int
) -> list[StoredSchedule]:
    """Lock and return up to ``limit`` paused schedules whose ``paused_until`` has passed,
    earliest first, through the ``paused_until`` index. On PostgreSQL rows another Beat
    has locked are skipped (``SKIP LOCKED``), so two Beats never resume one schedule; on
    SQLite the write transaction already excludes every other writer."""
    table = table_of(models.Schedule)
    stmt = (
        select(*readable_columns(table))
        .where(table.c.paused_until <= now, table.c.enabled.is_(False))
        .order_by(table.c.paused_until)
        .limit(limit)
    )
    if conn.dialect.name == "postgresql":
        stmt = stmt.with_for_update(skip_locked=True)
    return [stored(row) for row in conn.execute(stmt).mappings()]


def lock_config_rows(
    conn: Connection, models: Models, names: Iterable[str]
) -> dict[str, Mapping[Any, Any]]:
    """Lock and return the rows of source ``config`` and those named ``names``, by name."""
    table = table_of(models.Schedule)
    stmt = (
        select(*readable_columns(table))
        .where((table.c.source == "config") | table.c.name.in_(list(names)))
        .with_for_update()
    )
    return {row["name"]: row for row in conn.execute(stmt).mappings()}
