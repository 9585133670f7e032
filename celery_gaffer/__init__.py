"""celery-gaffer: safe scheduled and background jobs for Celery."""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

from .exceptions import (
    AlreadyProcessed,
    ConfigurationError,
    FenceLost,
    GafferError,
    InvalidInput,
    InvalidSchedule,
    LeaseHeld,
)

if TYPE_CHECKING:
    from .schedule_store import ScheduleStore
    from .scheduler import Scheduler
    from .schedules.kinds import At, Cron, Every, at, cron, every
    from .task import BatchReport, GafferTask
    from .wiring import install

    __version__: str

# The rest of the public names are imported on first use: Celery loads the ``gaffer``
# command (so this package) for every ``celery`` command, ``celery --help`` included,
# and the store, the scheduler and the task bring SQLAlchemy and most of Celery with them.
_LAZY = {
    "At": "schedules.kinds",
    "BatchReport": "task",
    "Cron": "schedules.kinds",
    "Every": "schedules.kinds",
    "GafferTask": "task",
    "ScheduleStore": "schedule_store",
    "Scheduler": "scheduler",
    "at": "schedules.kinds",
    "cron": "schedules.kinds",
    "every": "schedules.kinds",
    "install": "wiring",
}


def __getattr__(name: str) -> Any:
    if name == "__version__":
        from importlib.metadata import PackageNotFoundError, version

        try:
            value: Any = version("celery-gaffer")
        except PackageNotFoundError:  # pragma: no cover - a source tree not installed
            value = "0.0.0"
    elif name in _LAZY:
        value = getattr(import_module(f".{_LAZY[name]}", __name__), name)
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value  # looked up once
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


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
