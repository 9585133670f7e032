"""Bounded, resumable batches: ``GafferTask.run_batches``.

Each batch is one fenced transaction that handles its rows and saves the durable cursor,
so a run killed half-way is resumed by the next holder of the batch lease from the last
committed batch, and no row is handled twice in effect. No new batch starts once the
deadline has passed.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy.orm import Session

from ..store.cursors import load_cursor, record_progress, save_cursor
from .context import RunContext
from .sessions import fenced_sessions, run_info

Fetch = Callable[[Session, Any, int], Sequence[Any]]
Handle = Callable[[Session, Any], Any]
KeyOf = Callable[[Any], Any]


@dataclass(frozen=True, slots=True)
class BatchReport:
    """How a ``run_batches`` call ended.

    ``processed`` rows in this call, the ``cursor`` value saved last, whether the run
    ``caught_up`` (a batch came back short), the number of ``batches`` committed, and
    what stopped it: ``"caught_up"`` or ``"deadline"``.
    """

    processed: int
    cursor: Any
    caught_up: bool
    batches: int
    stopped_by: str


#: One batch in a transaction of its own: ``(cursor value, rows handled so far)`` in,
#: ``(rows handled, new cursor value, caught up)`` out, committed.
OneBatch = Callable[[Any, int], tuple[int, Any, bool]]


def run_batches(
    run: RunContext,
    cursor: str,
    fetch: Fetch,
    handle: Handle,
    key: KeyOf,
    *,
    batch_size: int,
    deadline: float | None,
    progress: Callable[..., None],
    clock: Callable[[], float] = time.monotonic,
) -> BatchReport:
    """Run batches under the lease ``batch:{cursor}`` (see GafferTask.run_batches)."""
    models = run.database.models
    factory = fenced_sessions(run.database.engine)

    def one_batch(value: Any, processed: int) -> tuple[int, Any, bool]:
        with factory(info=run_info(run, "claim")) as session:
            rows = list(fetch(session, value, batch_size))
            caught_up = len(rows) < batch_size
            for row in rows:
                handle(session, row)
            if rows:
                value = key(rows[-1])
            conn = session.connection()
            save_cursor(conn, models, cursor, value, len(rows), run.token)
            record_progress(conn, models, run.task_id, processed + len(rows), value)
            if caught_up:
                # The batch that catches up completes the key with its own writes.
                session.info["gaffer_claim"] = "complete"
            session.commit()
        return len(rows), value, caught_up

    return batch_loop(run, cursor, one_batch, deadline=deadline, progress=progress, clock=clock)


def batch_loop(
    run: RunContext,
    cursor: str,
    one_batch: OneBatch,
    *,
    deadline: float | None,
    progress: Callable[..., None],
    clock: Callable[[], float],
) -> BatchReport:
    """Run ``one_batch`` from the saved value of ``cursor`` until a batch catches up or
    the deadline has passed (no batch starts after it)."""
    started = clock()
    with run.database.read() as conn:
        value = load_cursor(conn, run.database.models, cursor)
    processed = batches = 0
    while True:
        if deadline is not None and clock() - started >= deadline:
            return BatchReport(processed, value, False, batches, "deadline")
        count, value, caught_up = one_batch(value, processed)
        processed += count
        batches += 1
        progress(processed=processed, cursor=value, batches=batches)
        if caught_up:
            return BatchReport(processed, value, True, batches, "caught_up")
