"""Idempotency keys, claimed in the transaction of the writes they protect.

A key is ``claimed`` while a resumable run (batches) is under way and ``completed`` once
its effect is done. Claiming is one upsert that only succeeds while the key is not
completed, so two deliveries racing to commit the same effect cannot both succeed: the
second waits on the first's uncommitted row, then finds it completed.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    Connection,
    bindparam,
    cast,
    literal,
    null,
    select,
)
from sqlalchemy.dialects import postgresql, sqlite

from ..exceptions import AlreadyProcessed
from ..protocol import KeyState
from .dbclock import db_now
from .models import Models, table_of
from .prebuilt import prebuilt

CLAIMED = KeyState.CLAIMED
COMPLETED = KeyState.COMPLETED


def key_state(conn: Connection, models: Models, key: str) -> str | None:
    """``claimed``, ``completed`` or None when the key was never claimed."""
    table = table_of(models.IdempotencyKey)
    state = conn.execute(select(table.c.state).where(table.c.key == key)).scalar()
    return None if state is None else str(state)


def claim_key(
    conn: Connection, models: Models, key: str, task_id: str, fence: int | None, *, complete: bool
) -> None:
    """Claim (or complete) ``key`` in the caller's transaction, or raise AlreadyProcessed.

    A key claimed by an earlier run that died is taken over (that run's work is resumed
    under a newer fence); a completed key is never claimed again.
    """
    statement = claim_statement(models, conn.dialect.name, complete=complete)
    params = {"key": key, "task_id": task_id, "fence": fence}
    if conn.execute(statement, params).first() is None:
        raise already_processed(key)


def already_processed(key: str) -> AlreadyProcessed:
    return AlreadyProcessed(f"key {key!r} was already completed by another run")


def claim_statement(models: Models, dialect_name: str, *, complete: bool) -> Any:
    """The claim upsert (parameters ``key``, ``task_id``, ``fence``), built once: it
    returns the key when it claimed or completed it, no row when the key was completed
    by another run."""

    def build() -> Any:
        table = table_of(models.IdempotencyKey)
        dialect = postgresql if dialect_name == "postgresql" else sqlite
        values = {
            "key": bindparam("key", type_=table.c.key.type),
            "state": literal(COMPLETED if complete else CLAIMED, table.c.state.type),
            "task_id": bindparam("task_id", type_=table.c.task_id.type),
            "fence": bindparam("fence", type_=table.c.fence.type),
            "claimed_at": db_now(),
            "completed_at": db_now() if complete else cast(null(), table.c.completed_at.type),
        }
        statement = dialect.insert(table).values(**values)
        return statement.on_conflict_do_update(
            index_elements=[table.c.key],
            set_={
                "state": statement.excluded.state,
                "task_id": statement.excluded.task_id,
                "fence": statement.excluded.fence,
                "completed_at": statement.excluded.completed_at,
            },
            where=table.c.state == CLAIMED,
        ).returning(table.c.key)

    return prebuilt((models.prefix, "claim", dialect_name, complete), build)
