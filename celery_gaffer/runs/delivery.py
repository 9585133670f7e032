"""One delivery of a Gaffer task, as the run and its signal receivers share it.

Celery hands the run (``GafferTask.__call__``) and the receivers (``task_prerun`` ...
``task_postrun``) the same request object. A :class:`Delivery` is stored on it once, under
one attribute, and carries everything they tell each other: the run record's id, the
key's state read with it, its overlap lease (:mod:`celery_gaffer.fencing.overlap`: taken
by its start record, left held by the run for its end record) and how the run ended.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from ..fencing.overlap import OverlapLease
from ..protocol import FireHeaders

#: The request attribute that holds the :class:`Delivery`.
ATTRIBUTE = "gaffer_delivery"


@dataclass(eq=False, slots=True)
class Delivery:
    """What one delivery's run and receivers know of it (see the module)."""

    #: The fire's headers (all None for a task not sent by the Gaffer scheduler).
    headers: FireHeaders = field(default_factory=FireHeaders)
    started_at: datetime | None = None
    #: The run record's id, once task_prerun recorded the start.
    row_id: int | None = None
    #: ``(key, state)`` of a GafferTask run's key, read with the start record.
    key_state: tuple[str, str | None] | None = None
    #: The run's overlap lease, from its start record to its end record.
    overlap: OverlapLease = field(default_factory=OverlapLease)
    #: A Gaffer outcome that overrides Celery's state (``duplicate``, ``skipped``...).
    outcome: str | None = None
    #: Why a run ended without doing its work (``duplicate``, ``skipped``): for its record.
    reason: str | None = None
    #: The key and last fence the run used, for its end record.
    run_key: str | None = None
    run_fence: int | None = None
    #: The error the run failed or retried with, and the seconds until the retry.
    error: BaseException | None = None
    retry_in: float | None = None
    #: That error's formatted traceback (from Celery's failure or retry signal).
    traceback: str | None = None
    #: The run's trace (a :class:`celery_gaffer.traces.RunTrace`), from start to end.
    trace: Any = None

    @classmethod
    def of(cls, request: Any) -> Delivery:
        """The delivery stored on ``request`` (made and stored on first use)."""
        found: Delivery | None = getattr(request, ATTRIBUTE, None)
        if found is None:
            found = cls(FireHeaders.of(request))
            setattr(request, ATTRIBUTE, found)
        return found

    @classmethod
    def find(cls, request: Any) -> Delivery | None:
        """The delivery stored on ``request``, if any."""
        found: Delivery | None = getattr(request, ATTRIBUTE, None)
        return found


def first_delivery(request: Any) -> bool:
    """Whether a Celery request is its task id's first delivery: not a retry, and not
    marked redelivered by the broker (RabbitMQ, and kombu's Redis transport when it
    restores an unacknowledged message). A message sent again under the same task id
    (by a client, or by Beat republishing a fire it could not confirm) is one too: the
    run rows of such a task id may precede it."""
    info = getattr(request, "delivery_info", None) or {}
    return not (request.retries or info.get("redelivered"))


class DeliveryPolicy:
    """What the run recorder asks of a Gaffer task (``GafferTask`` implements it).

    Kept here, below the task class, so that the recorder needs no import of it.
    """

    def gaffer_delivery_key(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str | None:
        """The idempotency key of a run with these arguments (None: no key)."""
        raise NotImplementedError

    def gaffer_overlap_lease(self) -> tuple[str, str] | None:
        """``(lease name, policy)`` of the run's overlap lease (None: runs may overlap)."""
        raise NotImplementedError
