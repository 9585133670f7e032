"""Gaffer's statements on a Django connection, in the transaction Django's ORM writes in.

``self.atomic()`` seals a Django transaction, and ``run_batches(..., orm="django")`` saves
its cursor, on the connection of the block's alias: the statements are the same
SQLAlchemy constructs as on Gaffer's own engine, compiled for the database with Django's
placeholder style (``%s``, which Django's cursors take on every backend) and run through
the connection's public ``cursor()``, with their parameters bound.

The seal is the one of :mod:`.seal`: on PostgreSQL one call of ``{prefix}seal``, whose
refusal (a Gaffer SQLSTATE) Django raises as its ``DatabaseError`` with psycopg's error
as ``__cause__``; on SQLite the key's claim, then each lease's fence check. The claim
goes first there: it is a write, so it takes SQLite's write lock, and the fence checked
after it cannot change before the commit (on PostgreSQL the check's ``FOR UPDATE`` row
lock does that).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy.engine import make_url

from ..exceptions import GafferError
from . import keys as key_rows
from . import leases as lease_rows
from .cursors import progress_statement, save_cursor_statement
from .models import Models
from .prebuilt import prebuilt
from .seal import REFUSALS, Held, seal_call, seal_params

#: Django's database vendors and the SQLAlchemy dialect that compiles for them.
DIALECTS = {"postgresql": "postgresql+psycopg://", "sqlite": "sqlite://"}


def dialect_for(vendor: str) -> Any:
    """A SQLAlchemy dialect for Django's ``vendor`` that writes ``%s`` placeholders."""

    def build() -> Any:
        url = DIALECTS.get(vendor)
        if url is None:
            raise GafferError(
                f"self.atomic(): Django's {vendor} database cannot hold the Gaffer tables; "
                "use PostgreSQL or SQLite"
            )
        dialect: Any = make_url(url).get_dialect()
        return dialect(paramstyle="format")

    return prebuilt(("django-dialect", vendor), build)


def execute(
    connection: Any, statement: Any, params: Mapping[str, Any] | None = None, *, key: Any = None
) -> list[Any]:
    """Run ``statement`` on the Django ``connection`` (in its open transaction) and
    return its rows. ``key``: the statement is prebuilt, and its compiled form is kept
    under this key."""
    dialect = dialect_for(connection.vendor)
    if key is None:
        compiled = statement.compile(dialect=dialect)
    else:
        compiled = prebuilt(
            ("django-compiled", connection.vendor, key), lambda: statement.compile(dialect=dialect)
        )
    values = compiled.construct_params(dict(params or {}))
    bound = []
    for name in compiled.positiontup or ():
        processor = compiled.binds[name].type.dialect_impl(dialect).bind_processor(dialect)
        bound.append(values[name] if processor is None else processor(values[name]))
    with connection.cursor() as cursor:
        cursor.execute(compiled.string, bound)
        return list(cursor.fetchall()) if cursor.description else []


def seal(
    connection: Any,
    models: Models,
    held: Sequence[Held],
    key: str | None,
    task_id: str,
    fence: int | None,
    *,
    complete: bool,
) -> None:
    """Check ``held`` and claim ``key`` in the Django ``connection``'s transaction; raise
    FenceLost or AlreadyProcessed (the block is then rolled back)."""
    if connection.vendor == "postgresql":
        params = seal_params(held, key, task_id, fence, complete=complete)
        try:
            execute(connection, seal_call(models), params, key=(models.prefix, "seal"))
        except Exception as exc:
            refused = refusal(exc)
            if refused is None:
                raise
            raise refused from None
        return
    if key is not None:
        claim = key_rows.claim_statement(models, "sqlite", complete=complete)
        params = {"key": key, "task_id": task_id, "fence": fence}
        if not execute(connection, claim, params, key=(models.prefix, "claim", complete)):
            raise key_rows.already_processed(key)
    check = lease_rows.fence_check_statement(models)
    for name, lease_fence, owner in held:
        params = lease_rows.fence_check_params(name, lease_fence, owner)
        if not execute(connection, check, params, key=(models.prefix, "lease_check")):
            raise lease_rows.fence_lost(name, lease_fence)


def refusal(exc: BaseException) -> GafferError | None:
    """The Gaffer error a refusal of ``{prefix}seal`` stands for, from the error Django
    raised (psycopg's is its ``__cause__``); None: not a refusal."""
    cause: Any = exc.__cause__
    error = REFUSALS.get(getattr(cause, "sqlstate", None) or "")
    if error is None:
        return None
    return error(cause.diag.message_primary or str(cause))


def save_cursor(
    connection: Any, models: Models, name: str, value: Any, processed: int, fence: int | None
) -> None:
    """Save the durable cursor ``name`` in the Django ``connection``'s transaction."""
    execute(
        connection,
        save_cursor_statement(models, connection.vendor, name, value, processed, fence),
    )


def record_progress(connection: Any, models: Models, task_id: str, items: int, cursor: Any) -> None:
    """Keep the run's row current, in the Django ``connection``'s transaction."""
    execute(connection, progress_statement(models, task_id, items, cursor))
