"""The schedules table's health columns: what Beat's health check locks, reads and writes,
and the survey of every schedule's health that `gaffer status` and the console read."""

from __future__ import annotations

from collections.abc import Generator, Mapping, Sequence
from datetime import datetime, timezone
from typing import Any

from sqlalchemy import (
    Column,
    ColumnElement,
    Connection,
    Dialect,
    Text,
    and_,
    bindparam,
    case,
    cast,
    func,
    or_,
    select,
    true,
    type_coerce,
)

from ..protocol import FireState, Health
from .arrays import on_postgresql, update_many
from .models import Models, table_of
from .schedule_rows import readable_columns
from .types import UTCDateTime

# Rows per statement when a list of parameters is sent to the database.
CHUNK = 1000


def health_columns(models: Models) -> list[Any]:
    """The columns a health evaluation reads (the schedule's JSON as text)."""
    table = table_of(models.Schedule)
    return [
        table.c.name,
        # CAST: psycopg would decode the JSON itself, without a depth bound.
        cast(table.c.schedule, Text).label("schedule"),
        table.c.enabled,
        table.c.error,
        table.c.grace,
        table.c.watermark_at,
        table.c.next_fire_at,
        table.c.health,
        table.c.consecutive_failures,
        table.c.last_success_at,
        table.c.last_success_nominal_at,
        table.c.start_at,
        table.c.end_at,
        table.c.max_runs,
        table.c.fired_count,
        cast(table.c.skip_on, Text).label("skip_on"),
        table.c.on_skip,
    ]


def lock_due_checks(
    conn: Connection, models: Models, now: datetime, limit: int
) -> list[Mapping[Any, Any]]:
    """Lock and return the rows whose ``check_at`` has passed (other Beats skip them)."""
    table = table_of(models.Schedule)
    stmt = (
        select(*health_columns(models))
        .where(table.c.check_at <= now)
        .order_by(table.c.check_at)
        .limit(limit)
    )
    if on_postgresql(conn):
        stmt = stmt.with_for_update(skip_locked=True, of=table)
    return list(conn.execute(stmt).mappings())


def set_healths(
    conn: Connection, models: Models, changes: Sequence[tuple[str, str, datetime | None]]
) -> None:
    """Store each ``(name, health, check_at)``: a schedule's evaluated health word and when
    to check it next, all in one statement per chunk."""
    rows = [{"name": n, "health": h, "check_at": c} for n, h, c in changes]
    update_many(
        conn,
        table_of(models.Schedule),
        "name",
        _HEALTH_COLUMNS,
        rows,
        lambda value: {"health": value("health"), "check_at": value("check_at")},
    )


_HEALTH_COLUMNS = (("name", "str"), ("health", "str"), ("check_at", "datetime"))


def health_rows(
    conn: Connection, models: Models, limit: int | None = None
) -> list[Mapping[Any, Any]]:
    """Every schedule's health columns, by name."""
    table = table_of(models.Schedule)
    stmt = select(*health_columns(models)).order_by(table.c.name).limit(limit)
    return list(conn.execute(stmt).mappings())


#: Rows fetched per round trip while a survey streams (a server-side cursor on PostgreSQL).
SURVEY_BATCH = 2000
# A grace beyond this many seconds (ten years; a valid one is at most a year) is left to
# the evaluation to report: the ledger is not looked up for it, so that no row's value
# can make the database's date arithmetic fail the whole survey.
_SANE_GRACE = 10 * 366 * 86400.0


def survey_rows(
    conn: Connection,
    models: Models,
    now: datetime,
    default_grace: float,
    *,
    alert_candidates: bool = False,
    every_column: bool = False,
    as_tuples: bool = False,
    batch: int = SURVEY_BATCH,
) -> Generator[Any, None, None]:
    """Every schedule's row by name, streamed, in one statement whatever their number:
    what ``gaffer status`` prints and the console's alerts page lists.

    ``stored_ok`` says whether the row is enabled, without error, and ``ok`` by the
    health word Beat stored, which holds until its ``check_at`` (Beat re-checks a row
    then, and at once after a run ends or the row changes; NULL: nothing left to
    check). A row is *evaluated* when it is enabled and without error but its word does
    not hold, or is not ``ok``: only then does it carry what
    :func:`celery_gaffer.beat.health.evaluate` reads beyond the facts a status line
    shows (``grace``, ``watermark_at``, the bounds; NULL otherwise, unless
    ``every_column``: every column, JSON as text) and ``ledger_latest``, the ledger's
    newest nominal time ``<= now - grace``, looked up in the same statement (one index
    lookup of the ledger's ``(schedule, nominal_at)`` key a row). ``alert_candidates``
    keeps only the rows that may be late, failing or in error: those in error, and the
    enabled ones stored ``late`` or ``failing`` or with a passed ``check_at``. Rows are
    fetched ``batch`` at a time (a caller that stops early asks for about what it
    reads: each evaluated row costs a ledger lookup); the caller owns the transaction
    and may stop early.

    Each row starts with its ``name`` and ``last_success_at`` (what only its status line
    reads: the rest of a row decides its health). ``as_tuples``: rows as tuples (the
    columns of :data:`SURVEY_COLUMNS`, unless ``every_column``), not mappings, and their
    instants but ``last_success_at`` as the driver gives them (aware, maybe in another
    zone: :func:`in_utc` converts them), so that a row's decoding costs less.
    """
    table = table_of(models.Schedule)
    holds = and_(
        table.c.health == Health.OK, or_(table.c.check_at.is_(None), table.c.check_at > now)
    )
    active = and_(table.c.error.is_(None), table.c.enabled.is_(true()))
    evaluated = and_(active, ~holds)
    grace = func.coalesce(table.c.grace, default_grace)
    until = _minus(conn, now, grace)
    fires = table_of(models.Fire)
    newest = (
        select(func.max(fires.c.nominal_at))
        .where(
            fires.c.schedule == table.c.name,
            fires.c.nominal_at <= until,
            fires.c.state != FireState.SKIPPED,  # a calendar's: never expected to run
        )
        .scalar_subquery()
    )
    sane = grace.between(-_SANE_GRACE, _SANE_GRACE)
    reading = _AsGiven if as_tuples else _ReadUTC
    ledger_latest = type_coerce(case((and_(evaluated, sane), newest), else_=None), reading())
    if every_column:
        columns = readable_columns(table)
    else:
        # Each value costs its decoding: a row that is not evaluated reads only the
        # facts its status line shows.
        columns = [
            column
            if column.name in _SHOWN
            else type_coerce(case((evaluated, column), else_=None), _read(column, reading)).label(
                column.name
            )
            for column in health_columns(models)
        ]
    columns.sort(key=lambda column: _FIRST.get(column.name, len(_FIRST)))  # stable
    columns = [_read_utc(column, reading) for column in columns]
    stmt = select(
        *columns,
        and_(active, holds).label("stored_ok"),
        ledger_latest.label("ledger_latest"),
    ).order_by(table.c.name)
    if alert_candidates:
        stmt = stmt.where(
            or_(
                table.c.error.is_not(None),
                and_(
                    table.c.enabled.is_(true()),
                    or_(table.c.health.in_([Health.LATE, Health.FAILING]), table.c.check_at <= now),
                ),
            )
        )
    result = conn.execute(stmt.execution_options(yield_per=batch))
    try:
        yield from (result.tuples() if as_tuples else result.mappings())
    finally:
        result.close()


# The columns every survey row starts with, in this order.
_FIRST = {"name": 0, "last_success_at": 1}
#: The columns of a survey row (without ``every_column``), in order.
SURVEY_COLUMNS = (
    "name",
    "last_success_at",
    "schedule",
    "enabled",
    "error",
    "grace",
    "watermark_at",
    "next_fire_at",
    "health",
    "consecutive_failures",
    "last_success_nominal_at",
    "start_at",
    "end_at",
    "max_runs",
    "fired_count",
    "skip_on",
    "on_skip",
    "stored_ok",
    "ledger_latest",
)


class _ReadUTC(UTCDateTime):
    """:class:`~.types.UTCDateTime` read at one call a value where the driver hands
    aware datetimes (psycopg): a survey reads several a row."""

    cache_ok = True

    def result_processor(self, dialect: Dialect, coltype: object) -> Any:
        if self.impl_instance.dialect_impl(dialect).result_processor(dialect, coltype):
            return super().result_processor(dialect, coltype)  # SQLite parses text first
        utc, checked = timezone.utc, self.process_result_value

        def process(value: Any) -> datetime | None:
            if value is None:
                return None
            if value.__class__ is datetime and value.tzinfo is not None:
                return value.astimezone(utc)
            return checked(value, dialect)  # what UTCDateTime refuses or mends

        return process


class _AsGiven(_ReadUTC):
    """Read as the driver hands it where it hands aware datetimes (psycopg: in the
    session's zone): :func:`in_utc` converts a row's when it is needed."""

    cache_ok = True

    def result_processor(self, dialect: Dialect, coltype: object) -> Any:
        if self.impl_instance.dialect_impl(dialect).result_processor(dialect, coltype):
            return super().result_processor(dialect, coltype)
        return None


def in_utc(values: Sequence[Any]) -> tuple[Any, ...]:
    """A tuple survey row with every instant in UTC (see ``as_tuples``)."""
    utc = timezone.utc
    return tuple(
        (value.replace(tzinfo=utc) if value.tzinfo is None else value.astimezone(utc))
        if isinstance(value, datetime)
        else value
        for value in values
    )


def _read(column: Any, reading: type[_ReadUTC]) -> Any:
    if not isinstance(column.type, UTCDateTime):
        return column.type
    # What a status line shows as it is read: each row's own last success.
    return _ReadUTC() if column.name == "last_success_at" else reading()


def _read_utc(column: Any, reading: type[_ReadUTC]) -> Any:
    # A table's own column (the others are made with their reading type).
    if isinstance(column, Column) and isinstance(column.type, UTCDateTime):
        return type_coerce(column, _read(column, reading)).label(column.name)
    return column


# What every row of a survey carries (the others only when the row is evaluated).
_SHOWN = frozenset(
    (
        "name",
        "schedule",
        "enabled",
        "error",
        "health",
        "consecutive_failures",
        "last_success_at",
        "last_success_nominal_at",
        "next_fire_at",
    )
)


def _minus(conn: Connection, now: datetime, seconds: ColumnElement[Any]) -> ColumnElement[Any]:
    """``now`` minus a column of seconds, as the database compares it with ``nominal_at``.

    PostgreSQL: exact ``timestamptz`` arithmetic. SQLite stores instants as text and
    counts milliseconds: ``now`` is cut to the millisecond (so that the database
    computes exactly from what it is given) and the result read as the end of its whole
    second; a nominal time is a whole second, so ``nominal_at <= now - grace`` is exact
    for every grace given to the millisecond.
    """
    if on_postgresql(conn):
        instant = bindparam(None, now, type_=UTCDateTime())
        return instant - func.make_interval(0, 0, 0, 0, 0, 0, seconds)
    utc = now.astimezone(timezone.utc).replace(tzinfo=None)
    text = utc.isoformat(" ", "milliseconds")  # cut, not rounded
    return func.strftime("%Y-%m-%d %H:%M:%S.999999", text, func.printf("%+.3f seconds", -seconds))


__all__ = [
    "SURVEY_COLUMNS",
    "health_columns",
    "health_rows",
    "in_utc",
    "lock_due_checks",
    "set_healths",
    "survey_rows",
]
