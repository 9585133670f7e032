"""The durable cursors of resumable batches, and the progress they leave on the run row."""

from __future__ import annotations

import json
from typing import Any

from sqlalchemy import Connection, select, update
from sqlalchemy.dialects import postgresql, sqlite

from ..protocol import RunState
from .dbclock import db_now
from .models import Models, table_of


def load_cursor(conn: Connection, models: Models, name: str) -> Any:
    table = table_of(models.Cursor)
    return conn.execute(select(table.c.value).where(table.c.name == name)).scalar()


def save_cursor(
    conn: Connection, models: Models, name: str, value: Any, processed: int, fence: int | None
) -> None:
    conn.execute(save_cursor_statement(models, conn.dialect.name, name, value, processed, fence))


def save_cursor_statement(
    models: Models, dialect_name: str, name: str, value: Any, processed: int, fence: int | None
) -> Any:
    """The upsert that saves cursor ``name`` (adding ``processed`` to its count)."""
    table = table_of(models.Cursor)
    dialect = postgresql if dialect_name == "postgresql" else sqlite
    statement = dialect.insert(table).values(
        name=name, value=value, processed=processed, fence=fence, updated_at=db_now()
    )
    return statement.on_conflict_do_update(
        index_elements=[table.c.name],
        set_={
            "value": statement.excluded.value,
            "processed": table.c.processed + processed,
            "fence": statement.excluded.fence,
            "updated_at": statement.excluded.updated_at,
        },
    )


def record_progress(
    conn: Connection, models: Models, task_id: str, items: int, cursor: Any
) -> None:
    """Keep the run's ``gaffer_job_runs`` row current (a no-op when it has none)."""
    conn.execute(progress_statement(models, task_id, items, cursor))


def progress_statement(models: Models, task_id: str, items: int, cursor: Any) -> Any:
    """The update of :func:`record_progress`."""
    table = table_of(models.JobRun)
    return (
        update(table)
        .where(table.c.task_id == task_id, table.c.state == RunState.RUNNING)
        .values(items=items, cursor=json.dumps(cursor, default=str), updated_at=db_now())
    )
