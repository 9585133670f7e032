"""``run_batches(..., orm="django")``: resumable batches written with Django's ORM.

As :mod:`.batches`, with each batch one ``self.atomic()`` transaction on the Gaffer
database's Django alias: ``fetch(after, limit)`` and ``handle(row)`` use the ORM (no
session argument), and the batch's cursor and progress are saved on the same connection,
in the same transaction, before the seal. A batch that has not caught up claims the run's
key; the one that catches up completes it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from ..store import django_statements
from .batches import BatchReport, KeyOf, batch_loop
from .context import RunContext
from .django_atomic import sealed_atomic

DjangoFetch = Callable[[Any, int], Sequence[Any]]
DjangoHandle = Callable[[Any], Any]


def run_django_batches(
    run: RunContext,
    alias: str,
    cursor: str,
    fetch: DjangoFetch,
    handle: DjangoHandle,
    key: KeyOf,
    *,
    batch_size: int,
    deadline: float | None,
    progress: Callable[..., None],
    clock: Callable[[], float] = time.monotonic,
) -> BatchReport:
    """Run batches under the lease ``batch:{cursor}`` (see GafferTask.run_batches)."""
    from django.db import connections

    models = run.database.models

    def one_batch(value: Any, processed: int) -> tuple[int, Any, bool]:
        with sealed_atomic(run, alias) as block:
            rows = list(fetch(value, batch_size))
            caught_up = len(rows) < batch_size
            for row in rows:
                handle(row)
            if rows:
                value = key(rows[-1])
            connection = connections[alias]
            django_statements.save_cursor(connection, models, cursor, value, len(rows), run.token)
            django_statements.record_progress(
                connection, models, run.task_id, processed + len(rows), value
            )
            block.claim = "complete" if caught_up else "claim"
        return len(rows), value, caught_up

    return batch_loop(run, cursor, one_batch, deadline=deadline, progress=progress, clock=clock)
