"""Type-checked (not run) use of the public API: `mypy --strict tests/typing`."""

from __future__ import annotations

import celery_gaffer
from celery_gaffer import (
    AlreadyProcessed,
    FenceLost,
    GafferError,
    InvalidSchedule,
    LeaseHeld,
    install,
)

version: str = celery_gaffer.__version__
errors: tuple[type[GafferError], ...] = (InvalidSchedule, FenceLost, AlreadyProcessed, LeaseHeld)
value_error: type[ValueError] = InvalidSchedule


def wire(app: object) -> None:
    install(app)
