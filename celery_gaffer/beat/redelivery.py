"""Delivery confirmation: publish again a sent fire that no worker ever started.

A fire is delivered once a run record with its task id exists (written at the run's
start). A fire without one ``gaffer_confirm_delivery_after`` seconds after its send was
either lost by the broker (a Redis restart without persistence) or is still waiting in a
queue behind a backlog. Only the first calls for a new send; taking the second for the
first would flood a slow queue with copies and then give up on fires that were about to
run. So a fire is published again only once it has been **overtaken**: a fire of the
same task sent after it has started (when no later fire of its task was sent, one of
any task). Queues are first in, first out, so a later message that started means this
one left the queue, and with no run record it was lost. A fire not yet overtaken waits
another ``confirm_after`` seconds, without using up one of its sends.

A fire whose message never reached a worker is published again for as long as it is
lost (a broker that keeps nothing, restarted behind a backlog, can lose the same fire
several times), each time a little later (``confirm_after`` doubled, up to 8 times). A
fire whose run died with its worker ``max_publishes`` times (a task that kills its
worker) is given up and marked ``unconfirmed``: the ``late`` alert takes it from there.

A run record proves delivery only while it can still end the fire. One lost with its
worker, or one that ended ``retrying`` (its retry is a new message, which the broker can
lose like the first), does not: :func:`celery_gaffer.store.fires.reopen` puts its fire
back to ``sent``, to be checked again once the retry had time to start.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import Connection

from ..protocol import FireState, RunState
from ..store import fires as ledger
from ..store.fires import Fire
from ..store.models import Models


@dataclass(frozen=True, slots=True)
class Confirmation:
    """What one confirmation pass found."""

    again: list[Fire]  # published again now
    delivered: int
    waiting: int  # not overtaken yet: behind a backlog, or no worker is consuming
    given_up: list[str]  # keys of fires whose run died with its worker max_publishes times
    handled: int  # fires looked at (a full batch: call again)


def claim_unconfirmed(
    conn: Connection,
    models: Models,
    now: datetime,
    confirm_after: float,
    max_publishes: int,
    limit: int,
) -> Confirmation:
    """Lock the sent fires due for confirmation and decide each one (see the module)."""
    due = ledger.lock_due_fires(conn, models, FireState.SENT, now, limit)
    if not due:
        return Confirmation([], 0, 0, [], 0)
    # A run lost with its worker, or one that ended ``retrying``, does not count: the
    # message that would end the fire (the redelivery, the retry) may be gone.
    started: set[str] = set()
    died: dict[str, int] = {}  # task id -> runs lost with their worker
    for task_id, state in ledger.run_states(conn, models, [fire.task_id for fire in due]):
        if state == RunState.LOST:
            died[task_id] = died.get(task_id, 0) + 1
        elif state != RunState.RETRYING:
            started.add(task_id)
    delivered = [fire.id for fire in due if fire.task_id in started]
    unseen = [fire for fire in due if fire.task_id not in started]
    overtaken = _overtaken(conn, models, unseen)
    again: list[Fire] = []
    given_up: list[Fire] = []
    for fire in unseen:
        if fire.id in overtaken:
            exhausted = died.get(fire.task_id, 0) >= max_publishes
            (given_up if exhausted else again).append(fire)
    waiting = [fire.id for fire in unseen if fire.id not in overtaken]
    ledger.set_fires(conn, models, delivered, state=FireState.DELIVERED)
    ledger.set_fires(conn, models, [fire.id for fire in given_up], state=FireState.UNCONFIRMED)
    ledger.set_fires(conn, models, waiting, publish_after=now + timedelta(seconds=confirm_after))
    # Each send waits longer for its run than the one before: doubled, at most 8 times.
    by_backoff: dict[float, list[int]] = {}
    for fire in again:
        backoff = confirm_after * min(2 ** max(fire.publish_count - 2, 0), 8)
        by_backoff.setdefault(backoff, []).append(fire.id)
    for backoff, ids in by_backoff.items():
        ledger.republish(
            conn, models, ids, publish_after=now + timedelta(seconds=backoff), sent_at=now
        )
    keys = [fire.key for fire in given_up]
    return Confirmation(again, len(delivered), len(waiting), keys, len(due))


def _overtaken(conn: Connection, models: Models, candidates: list[Fire]) -> set[int]:
    """Ids of ``candidates`` that a later-sent fire of their task (or any) has overtaken."""
    if not candidates:
        return set()
    facts = ledger.send_facts(conn, models, [fire.id for fire in candidates])
    since = min(created for _, created, _, _ in facts)
    per_task = ledger.sends_by_task(conn, models, since)
    any_started = max((s for _, s in per_task.values() if s is not None), default=None)
    result: set[int] = set()
    for fire_id, _created, sent_at, task in facts:
        if sent_at is None:
            continue
        last_sent, last_started = per_task.get(task, (None, None))
        if last_sent is None or last_sent <= sent_at:
            last_started = any_started  # nothing of its task came after it: any task
        if last_started is not None and last_started > sent_at:
            result.add(fire_id)
    return result
