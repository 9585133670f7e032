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
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any
from weakref import WeakKeyDictionary

from sqlalchemy.engine import URL

from ..django_database import django_alias, django_database_url
from ..exceptions import GafferError
from ..runtime import runtime
from ..settings import settings_for
from ..store import django_statements
from .context import RunContext


class OpenBlocks(WeakKeyDictionary[Any, int]):
    """How many ``self.atomic()`` blocks are open, by Django connection (one per thread
    and alias)."""


class CheckedAliases(dict[tuple[str, str], bool]):
    """Django aliases found to be the Gaffer database (or not), by alias and URL."""


@dataclass(slots=True)
class SealedBlock:
    """What the outermost block's seal does to the run's key: "complete" (the default),
    "claim" (a resumable batch that has not caught up) or None."""

    claim: str | None = "complete"


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
        same = checked[(alias, str(configured))] = _same_database(
            django_database_url(alias, "using"), configured
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
    blocks = runtime().part("django_blocks", OpenBlocks)
    depth = blocks.get(connection, 0)
    if depth == 0 and connection.in_atomic_block:
        raise GafferError(
            f"self.atomic(): opened inside a transaction.atomic() block on {alias!r}; open "
            "self.atomic() first and nest transaction.atomic() inside it (its seal must be "
            "the last statement before the COMMIT)"
        )
    block = SealedBlock()
    blocks[connection] = depth + 1
    try:
        with transaction.atomic(using=alias, savepoint=savepoint):
            yield block
            if depth == 0:
                _seal(connection, alias, run, block.claim)
    finally:
        if depth == 0:
            blocks.pop(connection, None)
        else:
            blocks[connection] = depth


def _seal(connection: Any, alias: str, run: RunContext, claim: str | None) -> None:
    from django.db import transaction

    plan = run.plan_seal(claim)
    django_statements.seal(
        connection,
        run.database.models,
        [(lease.name, lease.token, lease.owner) for lease in plan.checked],
        plan.key,
        plan.task_id,
        plan.fence,
        complete=plan.complete,
    )
    transaction.on_commit(partial(run.sealed, claim if plan.claims else None), using=alias)
