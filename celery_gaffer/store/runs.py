"""The run records (``gaffer_job_runs``): a run's start and end, heartbeats, lost runs.

The start and end statements of a GafferTask run are built once per table prefix
(:mod:`.prebuilt`); the rest run inside a transaction the caller owns.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import (
    Connection,
    Text,
    bindparam,
    cast,
    exists,
    func,
    insert,
    select,
    update,
)

from ..protocol import RunState
from .arrays import update_many
from .dbclock import db_now
from .keys import COMPLETED
from .leases import RELEASED, acquire_statement, held_by
from .models import Models, table_of
from .prebuilt import prebuilt

# The columns a run's start sets from bound parameters of the same name (``args`` and
# ``kwargs`` bounded by :mod:`celery_gaffer.runs.details`).
START_COLUMNS = (
    "task_id",
    "task_name",
    "schedule",
    "nominal_at",
    "key",
    "started_at",
    "worker",
    "args",
    "kwargs",
    "trace_id",
)


def start_statement(
    models: Models, *, with_key_state: bool, acquire: bool | None = None, counted: bool = True
) -> Any:
    """``INSERT`` a ``running`` row, returning its id (and the state of ``:run_key``).

    ``attempt`` is one more than the rows already recorded for the task id (``counted``),
    or 1 (a task id's first delivery: see
    :func:`celery_gaffer.runs.delivery.first_delivery`), which spares the
    statement an index probe into every partition of the table.

    ``acquire`` (PostgreSQL; True: stealing): the same statement also acquires the lease
    ``:name`` for ``:owner`` (parameters of :func:`~celery_gaffer.store.leases.acquire`) and
    returns its fence last: NULL when a live holder has it, or when the key ``:run_key``
    is completed (that delivery is a duplicate; pass ``run_key`` None without a key).
    """

    def build() -> Any:
        table = table_of(models.JobRun)
        attempt: Any = 1
        if counted:
            attempt = (
                select(func.count() + 1)
                .select_from(table)
                .where(table.c.task_id == bindparam("task_id"))
                .scalar_subquery()
            )
        returning: list[Any] = [table.c.id]
        if with_key_state:
            keys = table_of(models.IdempotencyKey)
            returning.append(
                select(keys.c.state).where(keys.c.key == bindparam("run_key")).scalar_subquery()
            )
        statement = insert(table)
        if acquire is not None:
            # Not for a delivery whose key is already completed: it will do nothing, and
            # must not take (or steal) the lease from a run that does work.
            keys = table_of(models.IdempotencyKey)
            done = exists().where(keys.c.key == bindparam("run_key"), keys.c.state == COMPLETED)
            acquired = acquire_statement(models, "postgresql", steal=acquire, unless=done)
            acquired = acquired.cte("acquired")
            statement = statement.add_cte(acquired)
            returning.append(select(acquired.c.fence).scalar_subquery())
        values: dict[str, Any] = {name: bindparam(name) for name in START_COLUMNS}
        return statement.values(
            **values, attempt=attempt, state=RunState.RUNNING, updated_at=db_now()
        ).returning(*returning)

    return prebuilt((models.prefix, "run_start", with_key_state, acquire, counted), build)


def finish_statement(models: Models, columns: Iterable[str], *, release: bool = False) -> Any:
    """``UPDATE`` the run row ``:b_row_id``, setting ``columns`` from parameters ``b_<column>``.

    (An ``UPDATE``'s parameters may not be named like its columns.)

    ``release`` (PostgreSQL): the same statement also frees the lease ``:l_name`` if
    ``:l_fence`` and ``:l_owner`` still hold it and no transaction has its row locked
    right now, and returns how many leases it freed (0 or 1; on 0 the caller frees it
    the waiting way).
    """
    names = tuple(sorted(columns))

    def build() -> Any:
        table = table_of(models.JobRun)
        values: dict[str, Any] = {name: bindparam("b_" + name) for name in names}
        statement = (
            update(table)
            .where(table.c.id == bindparam("b_row_id"))
            .values(**values, updated_at=db_now())
        )
        if not release:
            return statement
        leases = table_of(models.Lease)
        mine = held_by(leases, "l_")
        free = select(leases.c.name).where(*mine).with_for_update(skip_locked=True)
        released = (
            update(leases)
            .where(*mine, leases.c.name.in_(free.scalar_subquery()))
            .values(owner=None, lease_until=RELEASED)
            .returning(leases.c.name)
            .cte("released")
        )
        freed = select(func.count()).select_from(released).scalar_subquery()
        return statement.add_cte(released).returning(freed)

    return prebuilt((models.prefix, "run_finish", names, release), build)


#: The element type of each column a run's end record sets (:func:`finish_runs`).
END_COLUMN_TYPES = {
    "state": "str",
    "finished_at": "datetime",
    "duration": "float",
    "key": "str",
    "fence": "bigint",
    "error_type": "str",
    "error_message": "text",
    "traceback": "text",
}


def finish_runs(
    conn: Connection, models: Models, ends: Sequence[tuple[Any, dict[str, Any]]]
) -> None:
    """End several run rows, ``(row id, values)`` each, every ``values`` with the same
    columns (of :data:`END_COLUMN_TYPES`): on PostgreSQL one ``UPDATE ... FROM unnest``
    (one round trip, all or none), elsewhere one executemany."""
    names = sorted(ends[0][1])
    columns = [("id", "bigint"), *((name, END_COLUMN_TYPES[name]) for name in names)]

    def values(value_of: Any) -> dict[str, Any]:
        return {**{name: value_of(name) for name in names}, "updated_at": db_now()}

    update_many(
        conn,
        table_of(models.JobRun),
        "id",
        columns,
        [{"id": row_id, **row} for row_id, row in ends],
        values,
        name="run_finish_many:" + ",".join(names),
    )


#: States a run ends in (every state but ``running``).
FINAL_STATES = tuple(state for state in RunState if state != RunState.RUNNING)


def mark_stale_lost(
    conn: Connection, models: Models, stale_after: float, limit: int = 1000
) -> list[tuple[int, str | None, str]]:
    """Mark ``running`` rows whose heartbeat stopped ``stale_after`` seconds ago ``lost``;
    ``(id, schedule, task id)`` of each."""
    table = table_of(models.JobRun)
    stale = conn.execute(
        select(table.c.id, table.c.schedule, table.c.task_id)
        .where(table.c.state == RunState.RUNNING, table.c.updated_at < db_now(-stale_after))
        .limit(limit)
    ).all()
    if not stale:
        return []
    conn.execute(
        update(table)
        .where(table.c.id.in_([row.id for row in stale]), table.c.state == RunState.RUNNING)
        .values(
            state=RunState.LOST,
            finished_at=db_now(),
            updated_at=db_now(),
            error_type="WorkerLost",
            error_message="no heartbeat: the worker died or was killed mid-run",
        )
    )
    return [(row.id, row.schedule, row.task_id) for row in stale]


def touch_running(conn: Connection, models: Models, ids: Sequence[int]) -> None:
    """The heartbeat: refresh ``updated_at`` of the rows ``ids`` still running."""
    table = table_of(models.JobRun)
    conn.execute(
        update(table)
        .where(table.c.id.in_(list(ids)), table.c.state == RunState.RUNNING)
        .values(updated_at=db_now())
    )


def record_revoked(
    conn: Connection, models: Models, task_id: str, finished_at: datetime, row: dict[str, Any]
) -> None:
    """End the running row of ``task_id`` ``revoked``, or insert one (``row``: its columns)
    when the task was revoked before it started."""
    table = table_of(models.JobRun)
    updated = conn.execute(
        update(table)
        .where(table.c.task_id == task_id, table.c.state == RunState.RUNNING)
        .values(state=RunState.REVOKED, finished_at=finished_at, updated_at=db_now())
    ).rowcount
    if not updated:
        conn.execute(
            insert(table).values(
                task_id=task_id,
                attempt=1,
                state=RunState.REVOKED,
                finished_at=finished_at,
                updated_at=db_now(),
                **row,
            )
        )


def insert_runs(conn: Connection, models: Models, rows: Sequence[dict[str, Any]]) -> None:
    """Insert whole run rows (fires recorded ``missed``, say)."""
    if rows:
        conn.execute(insert(table_of(models.JobRun)), list(rows))


def finished_between(
    conn: Connection, models: Models, since: datetime, until: datetime, limit: int = 10_000
) -> tuple[list[tuple[str, int]], list[float]]:
    """Runs that reached a final state in ``(since, until]``: ``(state, count)`` pairs, and
    the durations of at most ``limit`` of them."""
    runs = table_of(models.JobRun)
    window = (
        runs.c.state.in_(FINAL_STATES),
        runs.c.updated_at > since,
        runs.c.updated_at <= until,
    )
    counts = conn.execute(
        select(runs.c.state, func.count()).where(*window).group_by(runs.c.state)
    ).all()
    durations = conn.execute(
        select(runs.c.duration).where(*window, runs.c.duration.is_not(None)).limit(limit)
    ).scalars()
    return [(state, int(count)) for state, count in counts], [float(d) for d in durations]


#: Columns only a run's own page reads: lists of runs leave them out (up to 32 KB a row).
DETAIL_COLUMNS = ("args", "kwargs", "traceback")


def listed_columns(table: Any) -> list[Any]:
    """The columns of the run table ``table`` that lists of runs read: all but
    :data:`DETAIL_COLUMNS`."""
    return [column for column in table.c if column.name not in DETAIL_COLUMNS]


def run_detail(conn: Connection, models: Models, run_id: int) -> dict[str, Any] | None:
    """Every column of the run row ``run_id``, with ``schedule_definition`` as in
    :func:`latest_runs`; None when there is no such row."""
    table = table_of(models.JobRun)
    schedules = table_of(models.Schedule)
    definition = cast(schedules.c.schedule, Text).label("schedule_definition")
    query = (
        select(table, definition)
        .select_from(table.outerjoin(schedules, schedules.c.name == table.c.schedule))
        .where(table.c.id == run_id)
    )
    row = conn.execute(query).mappings().first()
    return None if row is None else dict(row)


def latest_runs(
    conn: Connection,
    models: Models,
    *,
    limit: int,
    schedule: str | None = None,
    scheduled_only: bool = False,
) -> list[dict[str, Any]]:
    """The latest run rows, newest first (``schedule``: only its runs; ``scheduled_only``:
    only runs of schedules), each with ``schedule_definition``: its schedule's stored
    definition as JSON text (None for an ad-hoc run or a schedule since removed)."""
    table = table_of(models.JobRun)
    schedules = table_of(models.Schedule)
    definition = cast(schedules.c.schedule, Text).label("schedule_definition")
    query = (
        select(*listed_columns(table), definition)
        .select_from(table.outerjoin(schedules, schedules.c.name == table.c.schedule))
        .order_by(table.c.id.desc())
        .limit(limit)
    )
    if schedule is not None:
        query = query.where(table.c.schedule == schedule)
    elif scheduled_only:
        query = query.where(table.c.schedule.is_not(None))
    return [dict(row) for row in conn.execute(query).mappings()]
