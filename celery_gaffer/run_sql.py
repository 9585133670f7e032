"""The statements that record a run's start and end, built once per table prefix."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from sqlalchemy import bindparam, func, insert, select, update

from .store.dbclock import db_now
from .store.models import Models, table_of
from .store.statements import prebuilt

# The columns a run's start sets from bound parameters of the same name.
START_COLUMNS = ("task_id", "task_name", "schedule", "nominal_at", "key", "started_at", "worker")


def start_statement(models: Models, *, with_key_state: bool) -> Any:
    """``INSERT`` a ``running`` row, returning its id (and the state of ``:run_key``).

    ``attempt`` is one more than the rows already recorded for the task id.
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
        values: dict[str, Any] = {name: bindparam(name) for name in START_COLUMNS}
        return (
            insert(table)
            .values(**values, attempt=previous, state="running", updated_at=db_now())
            .returning(*returning)
        )

    return prebuilt((models.prefix, "run_start", with_key_state), build)


def finish_statement(models: Models, columns: Iterable[str]) -> Any:
    """``UPDATE`` the run row ``:b_row_id``, setting ``columns`` from parameters ``b_<column>``.

    (An ``UPDATE``'s parameters may not be named like its columns.)
    """
    names = tuple(sorted(columns))

    def build() -> Any:
        table = table_of(models.JobRun)
        values: dict[str, Any] = {name: bindparam("b_" + name) for name in names}
        return (
            update(table)
            .where(table.c.id == bindparam("b_row_id"))
            .values(**values, updated_at=db_now())
        )

    return prebuilt((models.prefix, "run_finish", names), build)
