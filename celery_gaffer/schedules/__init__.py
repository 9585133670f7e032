"""Schedules: ``cron``, ``every`` and ``at``, pure (no I/O), and the validation of schedule entries.

:mod:`.kinds` holds the schedule classes (Celery ``BaseSchedule`` subclasses),
:mod:`.cron_engine` the DST rules of cron over zoneinfo, and :mod:`.spec` the checks every
entry passes before anything is written.
"""

from __future__ import annotations

from .kinds import (
    At,
    Cron,
    Every,
    GafferSchedule,
    as_schedule,
    at,
    cron,
    every,
    schedule_from_dict,
)

__all__ = [
    "At",
    "Cron",
    "Every",
    "GafferSchedule",
    "as_schedule",
    "at",
    "cron",
    "every",
    "schedule_from_dict",
]
