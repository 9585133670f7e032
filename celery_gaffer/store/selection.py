"""The schedules a filter of the console's list matches (a bulk action's selection):
by task, source, zone, name and state, in name order, bounded.

``state`` keeps ``error`` rows, ``paused`` ones, or, for ``ok``/``late``/``failing``,
the rows whose stored health word is that one and those whose word is stale (the
caller evaluates them live and drops those in another state), as
:func:`.console.schedule_page` does.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, false, or_, select, true

from ..protocol import Health
from .models import Models, table_of
from .schedule_rows import readable_columns

#: The zone a schedule without one (``every``) is in.
UTC_NAMES = ("UTC", "Etc/UTC")


@dataclass(frozen=True, slots=True)
class Selection:
    """A filter of the list: every field optional."""

    state: str | None = None
    task: str | None = None
    zone: str | None = None
    source: str | None = None
    search: str | None = None


def selected_rows(
    conn: Connection,
    models: Models,
    selection: Selection,
    *,
    now: datetime,
    limit: int,
    after: str | None = None,
) -> list[Mapping[Any, Any]]:
    """Up to ``limit`` rows matching ``selection`` by name, the first named after
    ``after``; every column as :func:`~.schedule_rows.stored` reads them."""
    table = table_of(models.Schedule)
    stmt = select(*readable_columns(table)).order_by(table.c.name).limit(limit)
    if after is not None:
        stmt = stmt.where(table.c.name > after)
    if selection.task:
        stmt = stmt.where(table.c.task == selection.task)
    if selection.source:
        stmt = stmt.where(table.c.source == selection.source)
    if selection.search:
        stmt = stmt.where(table.c.name.icontains(selection.search, autoescape=True))
    if selection.zone:
        zone = table.c.schedule["tz"].as_string()
        if selection.zone in UTC_NAMES:
            stmt = stmt.where(or_(zone.is_(None), zone.in_(UTC_NAMES)))
        else:
            stmt = stmt.where(zone == selection.zone)
    state = selection.state
    if state == Health.ERROR:
        stmt = stmt.where(table.c.error.is_not(None))
    elif state == Health.PAUSED:
        stmt = stmt.where(table.c.error.is_(None), table.c.enabled.is_(false()))
    elif state is not None:
        stmt = stmt.where(
            table.c.error.is_(None),
            table.c.enabled.is_(true()),
            or_(table.c.health == state, table.c.check_at <= now),
        )
    return list(conn.execute(stmt).mappings())
