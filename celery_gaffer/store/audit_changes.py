"""What ``ScheduleStore`` and the config sync write to the audit log for a change.

A change's entry holds each field that changed as ``[before, after]``, JSON-able:
schedules in their dict form, times as ISO 8601 text, a ping URL masked. The entry is
written by :mod:`.audit` in the change's own transaction.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from ..schedules.calendars import rule_options
from ..settings import masked_ping_url
from .schedule_rows import StoredSchedule

#: The fields an entry compares, in the order it lists them.
FIELDS = (
    "task",
    "schedule",
    "args",
    "kwargs",
    "options",
    "catchup",
    "starting_deadline",
    "overlap",
    "grace",
    "start_at",
    "end_at",
    "max_runs",
    "ping_url",
    "skip_on",
    "on_skip",
    "enabled",
    "error",
    "paused_note",
    "paused_until",
    "source",
)

#: The fields an added schedule's entry gives (``[None, value]`` each).
ADDED_FIELDS = ("name", "task", "schedule")


def fields_of(stored: StoredSchedule) -> dict[str, Any]:
    """``stored``'s audited fields as JSON holds them."""
    policy, bounds = stored.policy, stored.policy.bounds
    return {
        "name": stored.name,
        "task": stored.task,
        "schedule": None if stored.schedule is None else stored.schedule.to_dict(),
        "args": stored.args,
        "kwargs": stored.kwargs,
        "options": stored.options,
        "catchup": policy.catchup,
        "starting_deadline": policy.starting_deadline,
        "overlap": policy.overlap,
        "grace": policy.grace,
        "start_at": _plain(bounds.start_at),
        "end_at": _plain(bounds.end_at),
        "max_runs": bounds.max_runs,
        "ping_url": None if policy.ping_url is None else masked_ping_url(policy.ping_url),
        **rule_options(bounds.calendar),
        "enabled": policy.enabled,
        "error": stored.error,
        "paused_note": stored.paused_note,
        "paused_until": _plain(stored.paused_until),
        "source": stored.source,
    }


def changes(before: StoredSchedule | None, after: StoredSchedule | None) -> dict[str, list[Any]]:
    """Each audited field that differs between ``before`` and ``after``: ``[before,
    after]``. A new schedule (``before`` None) gives its name, task and schedule; a removed
    one (``after`` None) the same, the other way round."""
    if before is None:
        return {} if after is None else {f: [None, fields_of(after)[f]] for f in ADDED_FIELDS}
    if after is None:
        return {field: [fields_of(before)[field], None] for field in ADDED_FIELDS}
    old, new = fields_of(before), fields_of(after)
    return {field: [old[field], new[field]] for field in FIELDS if old[field] != new[field]}


def _plain(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()
