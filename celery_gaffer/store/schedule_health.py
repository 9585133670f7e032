"""The schedules table's health columns: what Beat's health check locks, reads and writes."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, Text, select, type_coerce

from .arrays import on_postgresql, update_many
from .models import Models, table_of

# Rows per statement when a list of parameters is sent to the database.
CHUNK = 1000


def health_columns(models: Models) -> list[Any]:
    """The columns a health evaluation reads (the schedule's JSON as text)."""
    table = table_of(models.Schedule)
    return [
        table.c.name,
        type_coerce(table.c.schedule, Text).label("schedule"),
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


__all__ = ["health_columns", "health_rows", "lock_due_checks", "set_healths"]
