"""``GafferTask.atomic()``: a Django transaction sealed as a fenced session's commit is.

The block is ``django.db.transaction.atomic(using=alias)`` on the Gaffer database's
Django alias. When the outermost ``self.atomic()`` block ends without an error, the seal
(:mod:`celery_gaffer.store.django_statements`) runs on the same connection, in the same
transaction as the ORM's writes, right before Django commits it: every lease the run holds
is fence-checked with a row lock and the run's key is claimed or completed. A refusal
raises ``FenceLost`` or ``AlreadyProcessed`` inside the block, and Django rolls the whole
transaction back. The run learns that its key is completed from an ``on_commit`` callback,
so only once the commit is durable.

Rules, as the documentation states them:

* ``self.atomic()`` opens the transaction: inside a plain ``transaction.atomic()`` block
  on the same alias it raises ``GafferError`` (the seal must come right before the
  ``COMMIT``, and an enclosing block could go on writing, or swallow a refusal, after it).
* Plain ``transaction.atomic()`` blocks inside it are savepoints, as always; their writes
  are part of the transaction and sealed with it. A nested ``self.atomic()`` is one too:
  only the outermost seals.
* ``transaction.on_commit`` callbacks registered inside run after the sealed commit, never
  after a refused one.
* A block marked for rollback (``transaction.set_rollback(True)``) is not sealed: it
  commits nothing.
* A database whose ``AUTOCOMMIT`` is off is refused: its block's end does not commit.
* On SQLite, a session, a Core connection or a lease of the run inside the block is
  refused: Gaffer's own connection would wait for the block's write lock.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from sqlalchemy.engine import URL

from ..django_database import django_alias, django_database_url
from ..exceptions import GafferError
from ..runtime import runtime
from ..settings import settings_for
from ..store import django_statements
from .context import RunContext

#: The ``(alias, vendor)`` of each ``self.atomic()`` block open in this thread (context),
#: outermost first.
open_blocks: ContextVar[tuple[tuple[str, str], ...]] = ContextVar(
    "gaffer_django_blocks", default=()
)


class CheckedAliases(dict[tuple[str, str], bool]):
    """Django aliases found to be the Gaffer database (or not), by alias and URL."""


@dataclass(slots=True)
class SealedBlock:
    """What the outermost block's seal does to the run's key (``claim``: "complete", the
    default, "claim" for a resumable batch that has not caught up, or None), and what it
    did (``sealed``, ``claimed``), for the callback that runs after the commit."""

    claim: str | None = "complete"
    sealed: bool = False
    claimed: str | None = None


def gaffer_alias(app: Any, using: str | None) -> str:
    """The Django alias of the Gaffer database: ``using``, or the alias of
    ``gaffer_database_url = "django://<alias>"``. Raise GafferError when there is none, or
    when ``using`` names another database than the Gaffer tables'."""
    configured = settings_for(app).database_url
    alias = using or django_alias(app.conf.get("gaffer_database_url"))
    if alias is None:
        raise GafferError(
            "self.atomic(): gaffer_database_url is not a Django database; set "
            'CELERY_GAFFER_DATABASE_URL = "django://default" (or the alias that holds the '
            "Gaffer tables), or pass using="
        )
    checked = runtime().part("django_aliases", CheckedAliases)
    same = checked.get((alias, str(configured)))
    if same is None:
        field = "using" if using else "gaffer_database_url"
        same = checked[(alias, str(configured))] = _same_database(
            django_database_url(alias, field), configured
        )
    if not same:
        raise GafferError(
            f"self.atomic(using={alias!r}): DATABASES[{alias!r}] is not the Gaffer database "
            "(gaffer_database_url): its seal would check and claim in another transaction"
        )
    return alias


def _same_database(django: URL, gaffer: URL) -> bool:
    if django.get_backend_name() != gaffer.get_backend_name():
        return False
    if django.get_backend_name() == "sqlite":
        return Path(django.database or "").resolve() == Path(gaffer.database or "").resolve()
    return (django.host or "localhost", django.port or 5432, django.database) == (
        gaffer.host or "localhost",
        gaffer.port or 5432,
        gaffer.database,
    )


@contextmanager
def sealed_atomic(run: RunContext, alias: str, *, savepoint: bool = True) -> Iterator[SealedBlock]:
    """``transaction.atomic(using=alias)``, sealed for ``run`` when the outermost block
    ends (see the module's rules); the block's :class:`SealedBlock` says what the seal
    does to the key."""
    from django.db import connections, transaction

    connection = connections[alias]
    opened = open_blocks.get()
    outermost = all(open_alias != alias for open_alias, _ in opened)
    if outermost and connection.in_atomic_block:
        raise GafferError(
            f"self.atomic(): opened inside a transaction.atomic() block on {alias!r}; open "
            "self.atomic() first and nest transaction.atomic() inside it (its seal must be "
            "the last statement before the COMMIT)"
        )
    if outermost and not connection.get_autocommit():
        raise GafferError(
            f"self.atomic(): DATABASES[{alias!r}] has AUTOCOMMIT off, so the block's end "
            "does not commit and its seal would not be the last statement before the COMMIT"
        )
    block = SealedBlock()
    token = open_blocks.set((*opened, (alias, connection.vendor)))
    try:
        with transaction.atomic(using=alias, savepoint=savepoint):
            if outermost:
                # Registered first, so that it runs first: a later callback that raises
                # cannot keep the run from learning that its key is completed.
                transaction.on_commit(partial(_committed, run, block), using=alias)
            yield block
            # A block marked for rollback (transaction.set_rollback) commits nothing:
            # there is nothing to seal, and no statement may run.
            if outermost and not transaction.get_rollback(using=alias):
                _seal(connection, run, block)
    finally:
        open_blocks.reset(token)


def refuse_inside_sqlite_block(what: str) -> None:
    """Raise GafferError when a ``self.atomic()`` block is open on SQLite in this thread:
    ``what`` (a session, a lease) on Gaffer's own connection would wait for the block's
    write lock until it timed out."""
    for alias, vendor in open_blocks.get():
        if vendor == "sqlite":
            raise GafferError(
                f"{what} inside self.atomic() on SQLite ({alias!r}) would wait for the "
                "block's own write lock: take leases and make other writes before "
                "opening self.atomic()"
            )


def _seal(connection: Any, run: RunContext, block: SealedBlock) -> None:
    plan = run.plan_seal(block.claim)
    django_statements.seal(
        connection,
        run.database.models,
        [(lease.name, lease.token, lease.owner) for lease in plan.checked],
        plan.key,
        plan.task_id,
        plan.fence,
        complete=plan.complete,
    )
    block.sealed, block.claimed = True, block.claim if plan.claims else None


def _committed(run: RunContext, block: SealedBlock) -> None:
    if block.sealed:
        run.sealed(block.claimed)
