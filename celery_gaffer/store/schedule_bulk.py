"""A bulk load of schedule rows (``ScheduleStore.add_many``): ``COPY`` on PostgreSQL."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from sqlalchemy import Connection
from sqlalchemy.exc import NotSupportedError

from . import fastpath
from .models import Models, table_of
from .schedules import insert_schedules


def bulk_insert_schedules(conn: Connection, models: Models, rows: Sequence[dict[str, Any]]) -> None:
    """:func:`insert_schedules` for a bulk load: on PostgreSQL with psycopg the rows are
    streamed with ``COPY`` (JSON as text, each value serialised once), at what the
    server's own loading costs rather than a bound statement per row.

    Where ``COPY`` is refused (a table under row-level security), the chunk is inserted
    the plain way instead, from a savepoint; a repeated name raises IntegrityError either
    way.
    """
    if not rows:
        return
    table = table_of(models.Schedule)
    if not fastpath.can_copy(conn):
        insert_schedules(conn, models, rows)
        return
    names = [name for name, _ in _INSERT_COLUMNS]
    pairs = [(name, _INSERT_DEFAULTS.get(name)) for name in names]
    json_at = [i for i, name in enumerate(names) if name in _JSON_COLUMNS]
    texts: dict[int, str] = {}  # by id(): the rows (alive until the end) share dicts

    def values(row: dict[str, Any]) -> list[Any]:
        found = [row.get(name, default) for name, default in pairs]
        for i in json_at:
            value = found[i]
            if type(value) is list and not value:
                found[i] = "[]"
                continue
            if type(value) is dict and not value:
                found[i] = "{}"
                continue
            text = texts.get(id(value))
            if text is None:
                text = json.dumps(value)
                if type(value) is dict:
                    texts[id(value)] = text
            found[i] = text
        return found

    try:
        with conn.begin_nested():
            fastpath.copy_rows(conn, table, names, (values(row) for row in rows))
    except NotSupportedError:
        insert_schedules(conn, models, rows)


_JSON_COLUMNS = frozenset({"schedule", "args", "kwargs", "options"})
# Every column a new schedule row has (its id is generated), with its type.
_INSERT_COLUMNS = (
    ("name", "str"),
    ("task", "str"),
    ("schedule", "text"),
    ("args", "text"),
    ("kwargs", "text"),
    ("options", "text"),
    ("catchup", "str"),
    ("starting_deadline", "float"),
    ("overlap", "str"),
    ("grace", "float"),
    ("enabled", "bool"),
    ("source", "str"),
    ("watermark_at", "datetime"),
    ("next_fire_at", "datetime"),
    ("error", "text"),
    ("start_at", "datetime"),
    ("end_at", "datetime"),
    ("max_runs", "int"),
    ("fired_count", "int"),
    ("ping_url", "str"),
    ("health", "str"),
    ("check_at", "datetime"),
    ("consecutive_failures", "int"),
    ("last_success_at", "datetime"),
    ("last_success_nominal_at", "datetime"),
    ("created_at", "datetime"),
    ("updated_at", "datetime"),
)
# The values of the columns a row may leave out (the models' defaults).
_INSERT_DEFAULTS: dict[str, Any] = {
    "catchup": "latest",
    "overlap": "allow",
    "enabled": True,
    "source": "db",
    "fired_count": 0,
    "health": "ok",
    "consecutive_failures": 0,
}


__all__ = ["bulk_insert_schedules"]
