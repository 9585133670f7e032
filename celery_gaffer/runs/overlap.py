"""A run's overlap lease, taken with its start record and freed with its end record.

A GafferTask run with an overlap policy (``forbid`` or ``replace``) holds the lease
``overlap:...`` for its whole run. On PostgreSQL the statement that records the run's
start also acquires that lease (a data-modifying CTE), and the statement that records
its end also frees it: the lease costs the run no round trip of its own. Both run on
the lease engine (``lock_timeout``, commits that do not wait for the disk; see
:mod:`celery_gaffer.fencing.leases`).

The receivers in :mod:`.recorder` call these; :class:`~celery_gaffer.GafferTask`
adopts the lease taken at ``task_prerun`` and leaves it held at the end of the run when
``task_postrun`` will free it; the :class:`~.delivery.Delivery` carries it between
them. When the start record could not take it (a lock timeout, an error, SQLite), the
run acquires and releases the lease itself.
"""

from __future__ import annotations

import logging
from typing import Any

from celery import signals
from celery.app.trace import task_has_custom
from celery.backends.base import DisabledBackend
from sqlalchemy import Connection
from sqlalchemy.exc import OperationalError

from ..exceptions import GafferError, one_line
from ..fencing.context import new_owner
from ..fencing.leases import Lease, LeaseClient
from ..protocol import Overlap
from ..store import Database, fastpath
from ..store.database import is_lock_timeout
from ..store.runs import finish_statement, start_statement
from .delivery import Delivery, DeliveryPolicy, Taken

logger = logging.getLogger("celery_gaffer.runs")


def overlap_to_take(task: Any, database: Database) -> tuple[str, bool] | None:
    """``(lease name, steal)`` of ``task``'s overlap lease, when its start record can take it."""
    if not isinstance(task, DeliveryPolicy) or database.dialect != "postgresql":
        return None
    try:
        overlap = task.gaffer_overlap_lease()
    except GafferError:
        return None  # the run itself reports a bad policy, with its field
    if overlap is None:
        return None
    name, policy = overlap
    return name, policy == Overlap.REPLACE


def start_taking(
    database: Database,
    params: dict[str, Any],
    *,
    with_key_state: bool,
    overlap: tuple[str, bool],
    delivery: Delivery,
    hostname: str | None,
    counted: bool = True,
) -> Any:
    """Record the run's start and take its overlap lease in one statement; the row
    (``counted``: as :func:`~celery_gaffer.store.runs.start_statement` takes it).

    Sets ``delivery.taken``. On a lock timeout (a holder is committing on the
    lease row right now) records the start alone and leaves the lease to the run.
    """
    name, steal = overlap
    owner = new_owner(hostname, params["task_id"])
    ttl = float(database.settings.lease_ttl)
    statement = start_statement(
        database.models, with_key_state=with_key_state, acquire=steal, counted=counted
    )
    try:
        with database.leases() as conn:
            taking = {**params, "name": name, "owner": owner, "ttl": ttl}
            row = fastpath.execute(conn, statement, taking).one()
    except OperationalError as exc:
        if not is_lock_timeout(exc):
            raise
        plain = start_statement(database.models, with_key_state=with_key_state, counted=counted)
        with database.autocommit(relaxed=True) as conn:
            return fastpath.execute(conn, plain, params).one()
    fence = row[-1]
    delivery.taken = Taken(name, None if fence is None else int(fence), owner, ttl)
    return row


def ends_quietly(task: Any, request: Any) -> bool:
    """Whether Celery does nothing between the end of ``task``'s call and task_postrun
    that another worker or a client could see: no linked or chained task is sent, no
    result is stored, no handler of the task's runs and no task_success receiver. Only
    then may the run's leases be freed by its end record, at task_postrun. False when
    that cannot be told (never raises: it runs in the run's ``finally``)."""
    try:
        links = ("callbacks", "errbacks", "chain", "chord", "group")
        if any(getattr(request, name, None) for name in links):
            return False
        if stores_result(task, request) and not isinstance(task.backend, DisabledBackend):
            return False
        return not has_success_handlers(task, ("on_failure", "on_retry"))
    except Exception:  # noqa: BLE001 - a misconfigured backend, say: free them at once
        return False


def stores_result(task: Any, request: Any) -> bool:
    """Whether Celery stores the result of this delivery: the message's ``ignore_result``,
    when it has one, before the task's."""
    explicit = vars(request).get("ignore_result")  # Context's class default is False
    return not (task.ignore_result if explicit is None else explicit)


def has_success_handlers(task: Any, more: tuple[str, ...] = ()) -> bool:
    """Whether anything runs when ``task`` succeeds: its own ``on_success`` or
    ``after_return`` (or one of ``more``), or a ``task_success`` receiver."""
    handlers = ("on_success", "after_return", *more)
    if any(task_has_custom(task, name) for name in handlers):
        return True
    return bool(signals.task_success.receivers)


def left_held(delivery: Delivery, database: Database) -> list[Lease]:
    """The leases task_postrun frees with the run's end record: those the run left held,
    and a lease the start record took for a run whose ``__call__`` never ran (a
    ``before_start`` that raised, say)."""
    held, delivery.release_at_end = delivery.release_at_end, []
    taken, delivery.taken = delivery.taken, None
    if taken is not None and taken.fence is not None:
        client = LeaseClient(database)
        held.append(client.held(taken.name, taken.fence, taken.ttl, taken.owner))
    return held


def record_end(
    conn: Connection, database: Database, values: dict[str, Any], row_id: Any, held: list[Lease]
) -> list[Lease]:
    """Record the run's end (``values``), freeing ``held[0]`` in the same statement; the
    leases still to free (the others, and the first when its row was locked right then)."""
    params = {"b_" + name: value for name, value in values.items()}
    params["b_row_id"] = row_id
    if not held:
        fastpath.execute(conn, finish_statement(database.models, values), params)
        return []
    lease, *others = held
    statement = finish_statement(database.models, values, release=True)
    params.update(l_name=lease.name, l_fence=lease.token, l_owner=lease.owner)
    freed = fastpath.execute(conn, statement, params).scalar()
    return others if freed else held


def release_quietly(leases: list[Lease]) -> None:
    """Free ``leases`` the waiting way, logging failures (their TTL frees them anyway)."""
    for lease in leases:
        try:
            lease.client.release(lease)
        except Exception as exc:  # noqa: BLE001 - its TTL frees it anyway
            logger.warning(
                "could not release lease %s (fence %d); it expires with its TTL: %s",
                lease.name,
                lease.token,
                one_line(exc),
                extra={"action": "lease_release_failed", "lease": lease.name},
            )
