"""Type-checked (not run) use of the public API: `mypy --strict tests/typing`."""

from __future__ import annotations

from datetime import timedelta

import celery_gaffer
from celery_gaffer import (
    AlreadyProcessed,
    FenceLost,
    GafferError,
    InvalidSchedule,
    LeaseHeld,
    cron,
    every,
    install,
)
from celery_gaffer.exceptions import GafferConfigWarning

version: str = celery_gaffer.__version__
errors: tuple[type[GafferError], ...] = (InvalidSchedule, FenceLost, AlreadyProcessed, LeaseHeld)
value_error: type[ValueError] = InvalidSchedule


def wire(app: object) -> None:
    install(app)


def schedules() -> None:
    # A whole number of seconds, as an int, a whole float or a timedelta (every(1.5) is
    # typed too, and raises InvalidSchedule naming interval).
    every(60)
    every(60.0)
    every(timedelta(minutes=5), jitter=timedelta(seconds=10))
    cron("0 9 LW * *", "Europe/Paris", jitter=30)


config_warning: type[UserWarning] = GafferConfigWarning
