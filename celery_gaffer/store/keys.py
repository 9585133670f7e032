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
    Integer,
    bindparam,
    case,
    cast,
    exists,
    func,
    literal,
    null,
    select,
)
from sqlalchemy.dialects import postgresql, sqlite

from ..exceptions import AlreadyProcessed, FenceLost
from ..protocol import KeyState
from . import fastpath
from .dbclock import db_now
from .models import Models, table_of
from .prebuilt import prebuilt

CLAIMED = KeyState.CLAIMED
COMPLETED = KeyState.COMPLETED
#: The error of a guard whose key was completed by another run ("cannot take logarithm
#: of zero"; guards are explained in :mod:`celery_gaffer.store.leases`).
KEY_DONE_SQLSTATE = "2201E"


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
    statement = _claim_statement(models, conn.dialect.name, complete=complete, fenced=False)
    params = {"key": key, "task_id": task_id, "fence": fence}
    if fastpath.execute(conn, statement, params).first() is None:
        raise AlreadyProcessed(f"key {key!r} was already completed by another run")


def fenced_claim_key(
    conn: Connection,
    models: Models,
    lease: tuple[str, int, str],
    key: str,
    task_id: str,
    *,
    complete: bool,
) -> None:
    """:func:`check_fence` of ``lease`` then :func:`claim_key`, in one statement (PostgreSQL).

    The claim reads the locked lease row first (``INSERT ... SELECT ... WHERE EXISTS``),
    so the row locks are taken in the same order as the two statements would take them:
    lease row, then key row. Raises FenceLost, or AlreadyProcessed.
    """
    name, fence, owner = lease
    statement = _claim_statement(models, conn.dialect.name, complete=complete, fenced=True)
    params = {"key": key, "task_id": task_id, "fence": fence, "lease_name": name}
    params["lease_owner"] = owner
    fenced, claimed = fastpath.execute(conn, statement, params).one()
    if not fenced:
        raise FenceLost(f"lease {name!r}: fence {fence} is no longer current; write rejected")
    if not claimed:
        raise AlreadyProcessed(f"key {key!r} was already completed by another run")


def claim_guard(
    models: Models, key: str, task_id: str, fence: int | None, *, complete: bool
) -> tuple[Any, dict[str, Any]]:
    """:func:`claim_key` as a guard (PostgreSQL): a statement and its parameters that fail
    with :data:`KEY_DONE_SQLSTATE` when the key was completed by another run."""
    statement = _claim_statement(models, "postgresql", complete=complete, fenced=False, guard=True)
    return statement, {"key": key, "task_id": task_id, "fence": fence}


def fenced_claim_guard(
    models: Models, lease: tuple[str, int, str], key: str, task_id: str, *, complete: bool
) -> tuple[Any, dict[str, Any]]:
    """:func:`fenced_claim_key` as a guard (PostgreSQL): it fails with
    :data:`~celery_gaffer.store.leases.FENCE_LOST_SQLSTATE` when the fence is stale, with
    :data:`KEY_DONE_SQLSTATE` when the key was completed by another run."""
    name, fence, owner = lease
    statement = _claim_statement(models, "postgresql", complete=complete, fenced=True, guard=True)
    params = {"key": key, "task_id": task_id, "fence": fence, "lease_name": name}
    params["lease_owner"] = owner
    return statement, params


def _claim_statement(
    models: Models, dialect_name: str, *, complete: bool, fenced: bool, guard: bool = False
) -> Any:
    """The claim upsert (parameters ``key``, ``task_id``, ``fence``), built once.

    ``fenced`` (PostgreSQL): the upsert only inserts while ``fence`` and ``lease_owner``
    hold the lease ``lease_name``, locking its row first; the statement returns
    (fenced, claimed) counts.

    ``guard`` (PostgreSQL): the statement fails instead of returning a refusal (see
    "Guards" in :mod:`celery_gaffer.store.leases`).
    """

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
        locked = None
        if fenced:
            leases = table_of(models.Lease)
            locked = (
                select(leases.c.fence)
                .where(
                    leases.c.name == bindparam("lease_name"),
                    leases.c.fence == values["fence"],
                    leases.c.owner == bindparam("lease_owner"),
                )
                .with_for_update()
                .cte("gaffer_fence")
            )
            source = select(*(value.label(name) for name, value in values.items())).where(
                exists(select(locked.c.fence))
            )
            statement = dialect.insert(table).from_select(list(values), source)
        else:
            statement = dialect.insert(table).values(**values)
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
        if locked is None and not guard:
            return upsert
        claim = upsert.cte("gaffer_claim")
        claimed = select(func.count()).select_from(claim).scalar_subquery()
        if locked is None:
            return select(func.ln(claimed))
        fenced_count = select(func.count()).select_from(locked).scalar_subquery()
        if not guard:
            return select(fenced_count, claimed)
        refused = literal(1, Integer) / fenced_count  # a stale fence: division by zero
        return select(case((fenced_count == 0, refused), else_=func.ln(claimed)))

    return prebuilt((models.prefix, "claim", dialect_name, complete, fenced, guard), build)
