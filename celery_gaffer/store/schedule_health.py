"""The schedules table's health columns: what Beat's health check locks, reads and writes."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, Text, bindparam, select, type_coerce, update

from .arrays import on_postgresql, unnest
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
    to check it next (PostgreSQL: one ``UPDATE ... FROM unnest`` per chunk; elsewhere
    one executemany)."""
    if not changes:
        return
    table = table_of(models.Schedule)
    if on_postgresql(conn):
        source = unnest(_HEALTH_COLUMNS)
        stmt = (
            update(table)
            .where(table.c.name == source.c.name)
            .values(health=source.c.health, check_at=source.c.check_at)
        )
        for start in range(0, len(changes), CHUNK):
            part = changes[start : start + CHUNK]
            conn.execute(
                stmt,
                {
                    "b_name": [name for name, _, _ in part],
                    "b_health": [health for _, health, _ in part],
                    "b_check_at": [check_at for _, _, check_at in part],
                },
            )
        return
    stmt = (
        update(table)
        .where(table.c.name == bindparam("b_name"))
        .values(health=bindparam("b_health"), check_at=bindparam("b_check_at"))
    )
    conn.execute(
        stmt,
        [{"b_name": n, "b_health": h, "b_check_at": c} for n, h, c in changes],
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
