"""What Flower shows of a Gaffer delivery.

Flower keeps, of each task, only the fields of Celery's event state (``celery.events.
state.Task._fields``: state, result, exception, times, worker...), on its task list, its
task page and ``/api/task/info`` alike; any other field of an event is dropped. Two of
them can carry what Gaffer knows:

* **state** comes from the type of the task's last event: a custom ``task-<word>`` event
  makes it ``<WORD>`` while the task runs, and Celery's ``task-succeeded`` (SUCCESS)
  overrides it afterwards;
* **result** is free text.

So progress is a ``task-progress`` event whose ``result`` reads ``processed 300, cursor
300, batches 3``, and a delivery that did no work ends with a ``task-duplicate`` or
``task-skipped`` event whose ``result`` is the reason, instead of Celery's
``task-succeeded``: Flower's state is then ``DUPLICATE`` or ``SKIPPED``.
"""

from __future__ import annotations

import logging
from typing import Any

from celery.exceptions import Ignore

from ..exceptions import one_line
from .overlap import has_success_handlers, stores_result

logger = logging.getLogger("celery_gaffer")

#: Request fields of a workflow: Celery's success path sends its next steps.
_WORKFLOW = ("callbacks", "errbacks", "chain", "chord", "group")


def progress_fields(fields: dict[str, Any]) -> dict[str, Any]:
    """The fields of a ``task-progress`` event, with a ``result`` that Flower shows."""
    if "result" in fields:
        return dict(fields)
    return {**fields, "result": ", ".join(f"{name} {value}" for name, value in fields.items())}


def announce(task: Any, outcome: str, reason: str, *, key: str | None) -> None:
    """End a worker's delivery that did no work as ``outcome`` in Flower.

    Sends ``task-<outcome>`` (``result``: the reason; ``gaffer_outcome``, ``gaffer_key``
    and ``gaffer_reason`` for other event consumers), stores the delivery's result
    (None) as Celery would, then raises Celery's ``Ignore`` so that no ``task-succeeded``
    follows: the message is acknowledged as usual, and ``task_postrun`` gets the state
    ``IGNORED``. Nothing changes (Celery's success path runs, and Flower shows SUCCESS)
    for a call in the caller's process (eager or direct), for a step of a workflow
    (chain, callbacks, chord, group: that path sends the next steps), for a task with
    its own ``on_success`` or ``after_return`` or when anything receives
    ``task_success`` (they still run), or when the event cannot be sent.
    """
    request = task.request
    if request.called_directly or request.is_eager:
        return
    if any(getattr(request, name, None) for name in _WORKFLOW) or has_success_handlers(task):
        return
    try:
        task.send_event(
            f"task-{outcome}",
            result=f"{outcome}: {reason}",
            gaffer_outcome=outcome,
            gaffer_key=key,
            gaffer_reason=reason,
        )
        task.backend.mark_as_done(request.id, None, request, stores_result(task, request))
    except Exception as exc:  # noqa: BLE001 - Celery's own success path takes over
        logger.warning(
            "%s[%s] ended %s, but Flower will show SUCCESS: %s",
            task.name,
            request.id,
            outcome,
            one_line(exc),
            extra={"action": "announce_failed", "task_id": request.id},
        )
        return
    raise Ignore()
