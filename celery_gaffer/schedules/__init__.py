"""Schedules: ``cron`` and ``every``, pure (no I/O), and the validation of schedule entries.

:mod:`.kinds` holds the schedule classes (Celery ``BaseSchedule`` subclasses),
:mod:`.cron_engine` the DST rules of cron over zoneinfo, and :mod:`.spec` the checks every
entry passes before anything is written.
"""

from __future__ import annotations

from .kinds import Cron, Every, GafferSchedule, as_schedule, cron, every, schedule_from_dict

__all__ = ["Cron", "Every", "GafferSchedule", "as_schedule", "cron", "every", "schedule_from_dict"]
