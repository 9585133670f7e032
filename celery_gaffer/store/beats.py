"""The Beats' registry (``{prefix}beats``): one row per running Beat, refreshed as it
ticks, so the console and ``status`` can tell a running Beat from a stopped one."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Connection, delete, select
from sqlalchemy.dialects import postgresql, sqlite

from .models import Models, table_of


@dataclass(frozen=True, slots=True)
class BeatInfo:
    name: str
    host: str
    pid: int
    started_at: datetime
    last_tick_at: datetime


def heartbeat(
    conn: Connection,
    models: Models,
    *,
    name: str,
    host: str,
    pid: int,
    started_at: datetime,
    now: datetime,
) -> None:
    """Insert the Beat ``name`` or refresh its ``last_tick_at``."""
    table = table_of(models.Beat)
    dialect = postgresql if conn.dialect.name == "postgresql" else sqlite
    statement = dialect.insert(table).values(
        name=name, host=host, pid=pid, started_at=started_at, last_tick_at=now
    )
    conn.execute(
        statement.on_conflict_do_update(
            index_elements=[table.c.name],
            set_={"last_tick_at": statement.excluded.last_tick_at},
        )
    )


def forget(conn: Connection, models: Models, name: str) -> None:
    """Remove the Beat ``name`` (it stopped cleanly)."""
    table = table_of(models.Beat)
    conn.execute(delete(table).where(table.c.name == name))


def forget_before(conn: Connection, models: Models, before: datetime) -> int:
    """Remove Beats that have not ticked since ``before`` (they died); how many."""
    table = table_of(models.Beat)
    return conn.execute(delete(table).where(table.c.last_tick_at < before)).rowcount


def beats(conn: Connection, models: Models) -> list[BeatInfo]:
    """Every registered Beat, the most recent tick first."""
    table = table_of(models.Beat)
    rows = conn.execute(select(table).order_by(table.c.last_tick_at.desc(), table.c.name))
    return [
        BeatInfo(
            name=row.name,
            host=row.host,
            pid=row.pid,
            started_at=row.started_at,
            last_tick_at=row.last_tick_at,
        )
        for row in rows
    ]
