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
from ..store.cursors import load_cursor
from .batches import BatchReport, KeyOf
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

    database = run.database
    models = database.models
    started = clock()
    with database.read() as conn:
        value = load_cursor(conn, models, cursor)
    processed = batches = 0
    while True:
        if deadline is not None and clock() - started >= deadline:
            return BatchReport(processed, value, False, batches, "deadline")
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
        processed += len(rows)
        batches += 1
        progress(processed=processed, cursor=value, batches=batches)
        if caught_up:
            return BatchReport(processed, value, True, batches, "caught_up")
