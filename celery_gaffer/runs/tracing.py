"""The trace of a run (:mod:`celery_gaffer.traces`), started and ended by the recorder."""

from __future__ import annotations

from typing import Any

from ..protocol import FAILURE_STATES, RunState
from ..traces import end_run, start_run, tracer
from .delivery import Delivery

#: Outcomes whose span gets an error status.
_ERRORS = (*FAILURE_STATES, RunState.FENCE_LOST)


def run_started(task: Any, delivery: Delivery) -> str | None:
    """Start the run's span, a child of the fire's (None without OpenTelemetry or an
    SDK); return its trace id, for the run record."""
    traced = tracer()
    if traced is None:
        return None
    headers = delivery.headers
    attributes = {"gaffer.task": task.name}
    if headers.schedule:
        attributes["gaffer.schedule"] = headers.schedule
        attributes["gaffer.nominal_at"] = str(headers.nominal_at)
    if headers.key:
        attributes["gaffer.key"] = headers.key
    run = delivery.trace = start_run(traced, task.name, task.request, attributes)
    return run.trace_id


def run_ended(delivery: Delivery, outcome: str) -> None:
    """Set the run's outcome, fence and key on its span and end it (if Gaffer made it)."""
    run = delivery.trace
    if run is None:
        return
    delivery.trace = None
    key = delivery.run_key or (delivery.key_state[0] if delivery.key_state else None)
    end_run(
        run,
        {
            "gaffer.outcome": str(outcome),
            # Again: the instrumentation's span may not have been there at the start.
            "gaffer.schedule": delivery.headers.schedule,
            "gaffer.nominal_at": delivery.headers.nominal_at,
            "gaffer.fence": delivery.run_fence,
            # The run's idempotency key, else its fire's.
            "gaffer.key": key or delivery.headers.key,
        },
        failed=outcome in _ERRORS,
    )
