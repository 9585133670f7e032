"""The run records' side of a run's overlap lease: which lease a start record takes,
and when Celery lets the end record free it.

The lease itself (taken with the start record, adopted by the run, left for the end
record or released, freed by it) is :mod:`celery_gaffer.fencing.overlap`'s; its state
travels on the :class:`~.delivery.Delivery` (``delivery.overlap``). The receivers in
:mod:`.recorder` call the functions here; :class:`~celery_gaffer.GafferTask` asks
:func:`ends_quietly` whether its end record may free what the run leaves held.
"""

from __future__ import annotations

from typing import Any

from celery import signals
from celery.app.trace import task_has_custom
from celery.backends.base import DisabledBackend

from ..exceptions import GafferError
from ..fencing.leases import Lease
from ..fencing.overlap import Wanted, record_end, release_quietly, start_can_take
from ..store import Database
from ..store.runs import start_statement
from .delivery import Delivery, DeliveryPolicy

__all__ = [
    "ends_quietly",
    "has_success_handlers",
    "left_held",
    "overlap_to_take",
    "record_end",
    "release_quietly",
    "start_taking",
    "stores_result",
]


def overlap_to_take(task: Any, database: Database) -> Wanted | None:
    """``task``'s overlap lease, when its start record can take it."""
    if not isinstance(task, DeliveryPolicy) or not start_can_take(database):
        return None
    try:
        return Wanted.of(task.gaffer_overlap_lease())
    except GafferError:
        return None  # the run itself reports a bad policy, with its field


def start_taking(
    database: Database,
    params: dict[str, Any],
    *,
    with_key_state: bool,
    overlap: Wanted,
    delivery: Delivery,
    hostname: str | None,
    counted: bool = True,
) -> Any:
    """Record the run's start and take its overlap lease in one statement; the row
    (``counted``: as :func:`~celery_gaffer.store.runs.start_statement` takes it).

    On a lock timeout (a holder is committing on the lease row right now) records the
    start alone and leaves the lease to the run.
    """
    row = delivery.overlap.take_with_start(
        database, overlap, params, with_key_state=with_key_state, counted=counted, hostname=hostname
    )
    if row is None:
        plain = start_statement(database.models, with_key_state=with_key_state, counted=counted)
        with database.autocommit(relaxed=True) as conn:
            row = conn.execute(plain, params).one()
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
    """The leases task_postrun frees with the run's end record (see
    :meth:`~celery_gaffer.fencing.overlap.OverlapLease.left_for_end`)."""
    return delivery.overlap.left_for_end(database)
