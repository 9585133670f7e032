"""Idempotency keys, claimed in the transaction of the writes they protect.

A key is ``claimed`` while a resumable run (batches) is under way and ``completed`` once
its effect is done. Claiming is one upsert that only succeeds while the key is not
completed, so two deliveries racing to commit the same effect cannot both succeed: the
second waits on the first's uncommitted row, then finds it completed.
"""

from __future__ import annotations

from sqlalchemy import Connection, select
from sqlalchemy.dialects import postgresql, sqlite

from .exceptions import AlreadyProcessed
from .store.dbclock import db_now
from .store.models import Models, table_of

CLAIMED = "claimed"
COMPLETED = "completed"


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
    table = table_of(models.IdempotencyKey)
    dialect = postgresql if conn.dialect.name == "postgresql" else sqlite
    state = COMPLETED if complete else CLAIMED
    statement = dialect.insert(table).values(
        key=key,
        state=state,
        task_id=task_id,
        fence=fence,
        claimed_at=db_now(),
        completed_at=db_now() if complete else None,
    )
    upsert = statement.on_conflict_do_update(
        index_elements=[table.c.key],
        set_={
            "state": statement.excluded.state,
            "task_id": statement.excluded.task_id,
            "fence": statement.excluded.fence,
            "completed_at": statement.excluded.completed_at,
        },
        where=table.c.state == CLAIMED,
    ).returning(table.c.key)
    if conn.execute(upsert).first() is None:
        raise AlreadyProcessed(f"key {key!r} was already completed by another run")
