"""The statements that record a run's start and end, built once per table prefix."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from sqlalchemy import bindparam, exists, func, insert, select, update

from .idempotency import COMPLETED
from .leases import RELEASED, acquire_statement, held_by
from .store.dbclock import db_now
from .store.models import Models, table_of
from .store.statements import prebuilt

# The columns a run's start sets from bound parameters of the same name.
START_COLUMNS = ("task_id", "task_name", "schedule", "nominal_at", "key", "started_at", "worker")


def start_statement(models: Models, *, with_key_state: bool, acquire: bool | None = None) -> Any:
    """``INSERT`` a ``running`` row, returning its id (and the state of ``:run_key``).

    ``attempt`` is one more than the rows already recorded for the task id.

    ``acquire`` (PostgreSQL; True: stealing): the same statement also acquires the lease
    ``:name`` for ``:owner`` (parameters of :func:`~celery_gaffer.leases.acquire`) and
    returns its fence last: NULL when a live holder has it, or when the key ``:run_key``
    is completed (that delivery is a duplicate; pass ``run_key`` None without a key).
    """

    def build() -> Any:
        table = table_of(models.JobRun)
        previous = (
            select(func.count() + 1)
            .select_from(table)
            .where(table.c.task_id == bindparam("task_id"))
            .scalar_subquery()
        )
        returning: list[Any] = [table.c.id]
        if with_key_state:
            keys = table_of(models.IdempotencyKey)
            returning.append(
                select(keys.c.state).where(keys.c.key == bindparam("run_key")).scalar_subquery()
            )
        statement = insert(table)
        if acquire is not None:
            # Not for a delivery whose key is already completed: it will do nothing, and
            # must not take (or steal) the lease from a run that does work.
            keys = table_of(models.IdempotencyKey)
            done = exists().where(keys.c.key == bindparam("run_key"), keys.c.state == COMPLETED)
            acquired = acquire_statement(models, "postgresql", steal=acquire, unless=done)
            acquired = acquired.cte("acquired")
            statement = statement.add_cte(acquired)
            returning.append(select(acquired.c.fence).scalar_subquery())
        values: dict[str, Any] = {name: bindparam(name) for name in START_COLUMNS}
        return statement.values(
            **values, attempt=previous, state="running", updated_at=db_now()
        ).returning(*returning)

    return prebuilt((models.prefix, "run_start", with_key_state, acquire), build)


def finish_statement(models: Models, columns: Iterable[str], *, release: bool = False) -> Any:
    """``UPDATE`` the run row ``:b_row_id``, setting ``columns`` from parameters ``b_<column>``.

    (An ``UPDATE``'s parameters may not be named like its columns.)

    ``release`` (PostgreSQL): the same statement also frees the lease ``:l_name`` if
    ``:l_fence`` and ``:l_owner`` still hold it and no transaction has its row locked
    right now, and returns how many leases it freed (0 or 1; on 0 the caller frees it
    the waiting way).
    """
    names = tuple(sorted(columns))

    def build() -> Any:
        table = table_of(models.JobRun)
        values: dict[str, Any] = {name: bindparam("b_" + name) for name in names}
        statement = (
            update(table)
            .where(table.c.id == bindparam("b_row_id"))
            .values(**values, updated_at=db_now())
        )
        if not release:
            return statement
        leases = table_of(models.Lease)
        mine = held_by(leases, "l_")
        free = select(leases.c.name).where(*mine).with_for_update(skip_locked=True)
        released = (
            update(leases)
            .where(*mine, leases.c.name.in_(free.scalar_subquery()))
            .values(owner=None, lease_until=RELEASED)
            .returning(leases.c.name)
            .cte("released")
        )
        freed = select(func.count()).select_from(released).scalar_subquery()
        return statement.add_cte(released).returning(freed)

    return prebuilt((models.prefix, "run_finish", names, release), build)
