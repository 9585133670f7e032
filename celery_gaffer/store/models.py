"""SQLAlchemy 2 typed models of every table celery-gaffer owns.

Table names carry ``gaffer_table_prefix``, so the columns are declared once on plain
mixin classes and :func:`models_for` maps them onto a fresh registry per prefix. Code
types against the mixins (``ScheduleRow``...) and queries the mapped classes of a
:class:`Models`.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Date,
    Float,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
    func,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, declared_attr, mapped_column

from ..protocol import KEY_LENGTH, NAME_LENGTH, PING_URL_LENGTH
from .types import BigId, UTCDateTime

NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class ScheduleRow:
    """A schedule: what to send, when, and the watermark of the fires already decided.

    ``watermark_at`` is the latest nominal time whose fire has been decided (sent, skipped
    or missed); ``next_fire_at`` is the first nominal time after it, or NULL when the
    schedule is paused, in error or has no further fires. Beat reads only rows whose
    ``next_fire_at`` has passed, through its index; likewise it re-evaluates the health
    (``ok`` / ``late`` / ``failing``) only of rows whose ``check_at`` has passed.
    """

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    name: Mapped[str] = mapped_column(String(NAME_LENGTH), unique=True)
    task: Mapped[str] = mapped_column(String(255))
    schedule: Mapped[dict[str, Any]] = mapped_column(JSON)
    args: Mapped[list[Any]] = mapped_column(JSON)
    kwargs: Mapped[dict[str, Any]] = mapped_column(JSON)
    options: Mapped[dict[str, Any]] = mapped_column(JSON)
    catchup: Mapped[str] = mapped_column(String(8), default="latest")
    starting_deadline: Mapped[float | None] = mapped_column(Float, nullable=True)
    overlap: Mapped[str] = mapped_column(String(8), default="allow")
    grace: Mapped[float | None] = mapped_column(Float, nullable=True)
    enabled: Mapped[bool] = mapped_column(Boolean, default=True)
    source: Mapped[str] = mapped_column(String(8), default="db", index=True)
    watermark_at: Mapped[datetime] = mapped_column(UTCDateTime)
    next_fire_at: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True, index=True)
    error: Mapped[str | None] = mapped_column(Text, nullable=True)
    # Bounds (``gaffer`` options): no fire before start_at or after end_at, and none once
    # fired_count (the scheduled fires sent, counted by the tick that sends them)
    # reaches max_runs.
    start_at: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)
    end_at: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)
    max_runs: Mapped[int | None] = mapped_column(Integer, nullable=True)
    fired_count: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    # Pinged (healthchecks.io style) by the worker when a fire's run starts and ends.
    ping_url: Mapped[str | None] = mapped_column(String(PING_URL_LENGTH), nullable=True)
    # Business calendars (``gaffer`` options): fires on their dates skipped or moved.
    skip_on: Mapped[list[str] | None] = mapped_column(JSON, nullable=True)
    on_skip: Mapped[str | None] = mapped_column(String(12), nullable=True)
    # Health, kept current by the run recorder and Beat's health check.
    health: Mapped[str] = mapped_column(String(8), default="ok")
    check_at: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True, index=True)
    consecutive_failures: Mapped[int] = mapped_column(Integer, default=0)
    # Why the schedule was paused, and when Beat resumes it by itself (None: never).
    paused_note: Mapped[str | None] = mapped_column(Text, nullable=True)
    paused_until: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True, index=True)
    last_success_at: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)
    last_success_nominal_at: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime)


class FireRow:
    """One fire in the ledger: ``(schedule, nominal_at)`` is unique, so it is sent once.

    ``state`` is ``pending`` until published, then ``sent``; ``missed`` when it was older
    than the schedule's starting deadline. ``publish_after`` is when a pending fire may be
    (re)published by any Beat: its jittered send time (claimed up to a second before it
    while ``publish_count`` is 0), or the end of a Beat's claim.
    """

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    schedule: Mapped[str] = mapped_column(String(NAME_LENGTH))
    nominal_at: Mapped[datetime] = mapped_column(UTCDateTime)
    key: Mapped[str] = mapped_column(String(KEY_LENGTH))
    task_id: Mapped[str] = mapped_column(String(64))
    kind: Mapped[str] = mapped_column(String(10), default="scheduled")
    state: Mapped[str] = mapped_column(String(12), default="pending")
    publish_after: Mapped[datetime] = mapped_column(UTCDateTime)
    publish_count: Mapped[int] = mapped_column(Integer, default=0)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    sent_at: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)
    #: Why a calendar skipped or moved it ("2026-12-28: Boxing Day (observed), holidays:GB
    #: → skipped"), else NULL.
    reason: Mapped[str | None] = mapped_column(Text, nullable=True)

    @declared_attr.directive
    def __table_args__(cls) -> tuple[Any, ...]:
        return (
            UniqueConstraint("schedule", "nominal_at"),
            Index(f"ix_{cls.__tablename__}_state_publish_after", "state", "publish_after"),
            Index(f"ix_{cls.__tablename__}_created_at", "created_at"),
        )

    __tablename__: str


class LeaseRow:
    """A fenced lease: ``fence`` grows by one on every acquisition, never goes back."""

    name: Mapped[str] = mapped_column(String(255), primary_key=True)
    owner: Mapped[str | None] = mapped_column(String(255), nullable=True)
    fence: Mapped[int] = mapped_column(BigInteger, default=0)
    lease_until: Mapped[datetime] = mapped_column(UTCDateTime)
    acquired_at: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)


class IdempotencyKeyRow:
    """An idempotency key, claimed in the transaction of a run's first fenced write."""

    key: Mapped[str] = mapped_column(String(KEY_LENGTH), primary_key=True)
    state: Mapped[str] = mapped_column(String(10), default="claimed")
    task_id: Mapped[str] = mapped_column(String(255))
    fence: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    claimed_at: Mapped[datetime] = mapped_column(UTCDateTime)
    completed_at: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True, index=True)


class CursorRow:
    """The durable cursor of a resumable batch job, saved with each batch's writes."""

    name: Mapped[str] = mapped_column(String(KEY_LENGTH), primary_key=True)
    value: Mapped[Any] = mapped_column(JSON, nullable=True)
    processed: Mapped[int] = mapped_column(BigInteger, default=0)
    fence: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime)


class JobRunRow:
    """One delivery of a Gaffer task or a Gaffer-scheduled task (``gaffer_job_runs``).

    On PostgreSQL the table is partitioned by week of ``created_at``, and the ledger by
    week of ``nominal_at`` (their primary keys include that column there).
    """

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    task_id: Mapped[str] = mapped_column(String(255), index=True)
    task_name: Mapped[str] = mapped_column(String(255))
    schedule: Mapped[str | None] = mapped_column(String(NAME_LENGTH), nullable=True)
    nominal_at: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)
    key: Mapped[str | None] = mapped_column(String(KEY_LENGTH), nullable=True)
    attempt: Mapped[int] = mapped_column(Integer, default=1)
    state: Mapped[str] = mapped_column(String(12))
    started_at: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)
    duration: Mapped[float | None] = mapped_column(Float, nullable=True)
    items: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    cursor: Mapped[str | None] = mapped_column(Text, nullable=True)
    fence: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    lease: Mapped[str | None] = mapped_column(String(255), nullable=True)
    worker: Mapped[str | None] = mapped_column(String(255), nullable=True)
    error_type: Mapped[str | None] = mapped_column(String(255), nullable=True)
    error_message: Mapped[str | None] = mapped_column(Text, nullable=True)
    next_run_at: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)
    # The delivery's arguments and the failure's traceback, bounded in size.
    args: Mapped[Any] = mapped_column(JSON, nullable=True)
    kwargs: Mapped[Any] = mapped_column(JSON, nullable=True)
    traceback: Mapped[str | None] = mapped_column(Text, nullable=True)
    # The run's OpenTelemetry trace id (32 hex digits), when it was traced.
    trace_id: Mapped[str | None] = mapped_column(String(32), nullable=True)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime)
    # When the row was written, by the database's clock: the week partition it is in on
    # PostgreSQL (see store/partitions.py).
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, server_default=func.now())

    @declared_attr.directive
    def __table_args__(cls) -> tuple[Any, ...]:
        return (
            Index(f"ix_{cls.__tablename__}_schedule_nominal_at", "schedule", "nominal_at"),
            Index(f"ix_{cls.__tablename__}_state_updated_at", "state", "updated_at"),
        )

    __tablename__: str


class AlertRow:
    """An alert of a schedule's health change, waiting in the outbox until it is sent.

    Written in the transaction that stores the change; ``next_attempt_at`` is when any
    Beat may (re)try to POST it, NULL once sent or given up.
    """

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    schedule: Mapped[str] = mapped_column(String(NAME_LENGTH))
    body: Mapped[dict[str, Any]] = mapped_column(JSON)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    next_attempt_at: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True, index=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, index=True)
    sent_at: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)
    last_error: Mapped[str | None] = mapped_column(Text, nullable=True)


class AuditRow:
    """One change to a schedule, written in the change's transaction: when, who
    (``actor``), through what (``source``: cli, api, console, admin, config, import, code, beat),
    the action, the note, and each changed field as ``{field: [before, after]}``."""

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    at: Mapped[datetime] = mapped_column(UTCDateTime, index=True)
    actor: Mapped[str] = mapped_column(String(255))
    source: Mapped[str] = mapped_column(String(8))
    action: Mapped[str] = mapped_column(String(32))
    schedule: Mapped[str | None] = mapped_column(String(NAME_LENGTH), nullable=True)
    note: Mapped[str | None] = mapped_column(Text, nullable=True)
    changes: Mapped[dict[str, Any]] = mapped_column(JSON)

    @declared_attr.directive
    def __table_args__(cls) -> tuple[Any, ...]:
        return (Index(f"ix_{cls.__tablename__}_schedule_id", "schedule", "id"),)

    __tablename__: str


class BeatRow:
    """A running Beat, refreshed as it ticks: the console's "is Beat running"."""

    name: Mapped[str] = mapped_column(String(255), primary_key=True)
    host: Mapped[str] = mapped_column(String(255))
    pid: Mapped[int] = mapped_column(Integer)
    started_at: Mapped[datetime] = mapped_column(UTCDateTime)
    last_tick_at: Mapped[datetime] = mapped_column(UTCDateTime)


class CalendarDayRow:
    """One date of a calendar stored in the database (``celery gaffer calendars add``);
    a calendar exists while it has a date."""

    calendar: Mapped[str] = mapped_column(String(64), primary_key=True)
    day: Mapped[date] = mapped_column(Date, primary_key=True)


@dataclass(frozen=True, slots=True)
class Models:
    """The mapped classes and metadata of one table prefix."""

    prefix: str
    metadata: MetaData
    Schedule: type[ScheduleRow]
    Fire: type[FireRow]
    Lease: type[LeaseRow]
    IdempotencyKey: type[IdempotencyKeyRow]
    Cursor: type[CursorRow]
    JobRun: type[JobRunRow]
    Alert: type[AlertRow]
    Audit: type[AuditRow]
    Beat: type[BeatRow]
    CalendarDay: type[CalendarDayRow]

    @property
    def version_table(self) -> str:
        """Alembic's version table for these tables; never the user's own."""
        return f"{self.prefix}alembic_version"


@functools.cache
def models_for(prefix: str = "gaffer_") -> Models:
    """The models whose tables are named ``{prefix}schedules``, ``{prefix}fires``, ...."""

    class Base(DeclarativeBase):
        metadata = MetaData(naming_convention=NAMING_CONVENTION)

    class Schedule(ScheduleRow, Base):
        __tablename__ = f"{prefix}schedules"

    class Fire(FireRow, Base):
        __tablename__ = f"{prefix}fires"

    class Lease(LeaseRow, Base):
        __tablename__ = f"{prefix}leases"

    class IdempotencyKey(IdempotencyKeyRow, Base):
        __tablename__ = f"{prefix}keys"

    class Cursor(CursorRow, Base):
        __tablename__ = f"{prefix}cursors"

    class JobRun(JobRunRow, Base):
        __tablename__ = f"{prefix}job_runs"

    class Alert(AlertRow, Base):
        __tablename__ = f"{prefix}alerts"

    class Audit(AuditRow, Base):
        __tablename__ = f"{prefix}audit"

    class Beat(BeatRow, Base):
        __tablename__ = f"{prefix}beats"

    class CalendarDay(CalendarDayRow, Base):
        __tablename__ = f"{prefix}calendar_days"

    return Models(
        prefix=prefix,
        metadata=Base.metadata,
        Schedule=Schedule,
        Fire=Fire,
        Lease=Lease,
        IdempotencyKey=IdempotencyKey,
        Cursor=Cursor,
        JobRun=JobRun,
        Alert=Alert,
        Audit=Audit,
        Beat=Beat,
        CalendarDay=CalendarDay,
    )


def table_of(model: type[Any]) -> Table:
    """The Core table a mapped class is mapped to."""
    table = model.__table__
    if not isinstance(table, Table):
        raise TypeError(f"{model!r} is not mapped to a table")
    return table
