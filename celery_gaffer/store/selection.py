"""The schedules a filter of the console's list matches (a bulk action's selection):
by task, source, zone, name and state, in name order, bounded.

The conditions are the list's own (:func:`.console_lists.filter_conditions`), so a bulk
action over a filter selects what the list shows. ``state`` keeps ``error`` rows,
``paused`` ones, or, for ``ok``/``late``/``failing``, the rows whose stored health word
is that one and those whose word is stale (the caller evaluates them live and drops
those in another state), as the list does.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, select

from .console_lists import ScheduleFilter, filter_conditions
from .models import Models, table_of
from .schedule_rows import readable_columns

#: A bulk action's filter: the list's.
Selection = ScheduleFilter


def selected_rows(
    conn: Connection,
    models: Models,
    selection: ScheduleFilter,
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
    return list(conn.execute(stmt.where(*filter_conditions(table, selection, now))).mappings())
