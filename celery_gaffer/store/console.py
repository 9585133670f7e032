"""What the web console reads: a page of schedules, their latest runs, a schedule's ledger
and the latest runs (the schedules that may be alerting: :mod:`.schedule_health`'s survey,
which ``gaffer status`` reads too).

Every read is bounded and follows an index, so a page costs the same at 100,000 schedules
as at ten: schedules are paged by name (keyset on the unique name index, never an
``OFFSET``), the latest run of each schedule on a page is one statement of index lookups
(``(schedule, nominal_at)``), and a schedule's ledger is read through its unique
``(schedule, nominal_at)`` key. The functions run inside a transaction the caller owns.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import Connection, Text, cast, select

from ..protocol import Health
from .models import Models, table_of
from .runs import listed_columns
from .schedule_rows import readable_columns

#: The state words a page of schedules can be filtered by.
STATES = tuple(str(state) for state in Health)


def schedule_row(conn: Connection, models: Models, name: str) -> Mapping[Any, Any] | None:
    """The row of ``name`` with every column, JSON as text, or None."""
    table = table_of(models.Schedule)
    stmt = select(*readable_columns(table)).where(table.c.name == name)
    return conn.execute(stmt).mappings().one_or_none()


def latest_runs_of(
    conn: Connection, models: Models, names: Sequence[str]
) -> dict[str, Mapping[Any, Any]]:
    """The run of each named schedule with the latest nominal time (the highest id among
    runs of one fire), by schedule name; schedules without runs are left out.

    One statement: for each schedule, one backward step on the runs' ``(schedule,
    nominal_at)`` index, whatever the length of the history.
    """
    if not names:
        return {}
    runs = table_of(models.JobRun)
    schedules = table_of(models.Schedule)
    inner = runs.alias("previous")
    latest_id = (
        select(inner.c.id)
        .where(inner.c.schedule == schedules.c.name, inner.c.nominal_at.is_not(None))
        .order_by(inner.c.nominal_at.desc(), inner.c.id.desc())
        .limit(1)
        .scalar_subquery()
    )
    ids = select(latest_id).where(schedules.c.name.in_(list(names)))
    rows = conn.execute(select(*listed_columns(runs)).where(runs.c.id.in_(ids))).mappings()
    return {row["schedule"]: row for row in rows}


def ledger_fires(
    conn: Connection, models: Models, name: str, limit: int
) -> list[Mapping[Any, Any]]:
    """The latest ``limit`` fires of ``name`` in the ledger, newest nominal time first."""
    fires = table_of(models.Fire)
    stmt = (
        select(fires)
        .where(fires.c.schedule == name)
        .order_by(fires.c.nominal_at.desc())
        .limit(limit)
    )
    return list(conn.execute(stmt).mappings())


def recent_runs(
    conn: Connection,
    models: Models,
    *,
    limit: int,
    state: str | None = None,
    schedule: str | None = None,
) -> list[dict[str, Any]]:
    """The latest ``limit`` runs, each with ``schedule_definition`` (its schedule's stored
    definition as JSON text, None for an ad-hoc run or a removed schedule).

    Ordered along the index the filter uses: by nominal time for one schedule (its
    ``(schedule, nominal_at)`` index), by last update for one state (``(state,
    updated_at)``), else newest first by id.
    """
    runs = table_of(models.JobRun)
    schedules = table_of(models.Schedule)
    definition = cast(schedules.c.schedule, Text).label("schedule_definition")
    stmt = (
        select(*listed_columns(runs), definition)
        .select_from(runs.outerjoin(schedules, schedules.c.name == runs.c.schedule))
        .limit(limit)
    )
    if schedule is not None:
        stmt = stmt.where(runs.c.schedule == schedule).order_by(
            runs.c.nominal_at.desc(), runs.c.id.desc()
        )
    elif state is not None:
        stmt = stmt.order_by(runs.c.updated_at.desc(), runs.c.id.desc())
    else:
        stmt = stmt.order_by(runs.c.id.desc())
    if state is not None:
        stmt = stmt.where(runs.c.state == state)
    return [dict(row) for row in conn.execute(stmt).mappings()]
