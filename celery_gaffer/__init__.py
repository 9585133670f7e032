"""celery-gaffer: safe scheduled and background jobs for Celery."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

from .exceptions import (
    AlreadyProcessed,
    ConfigurationError,
    FenceLost,
    GafferError,
    InvalidInput,
    InvalidSchedule,
    LeaseHeld,
)
from .schedule_store import ScheduleStore
from .scheduler import Scheduler
from .schedules.kinds import At, Cron, Every, at, cron, every
from .task import BatchReport, GafferTask
from .wiring import install

try:
    __version__ = version("celery-gaffer")
except PackageNotFoundError:  # pragma: no cover - running from a source tree not installed
    __version__ = "0.0.0"

__all__ = [
    "AlreadyProcessed",
    "At",
    "BatchReport",
    "ConfigurationError",
    "Cron",
    "Every",
    "FenceLost",
    "GafferError",
    "GafferTask",
    "InvalidInput",
    "InvalidSchedule",
    "LeaseHeld",
    "ScheduleStore",
    "Scheduler",
    "__version__",
    "at",
    "cron",
    "every",
    "install",
]
