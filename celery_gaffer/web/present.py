"""How the console words things: schedules in words and as written, instants in the
schedule's zone and UTC, and the JSON shapes of the API. Pure: no I/O."""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Any

from ..readable import run_reason
from ..schedules.display import describe, when, zone_of
from ..schedules.kinds import At, Cron, Every, Schedule
from ..store.schedule_rows import StoredSchedule

__all__ = [
    "describe",
    "in_words",
    "iso",
    "run_detail_json",
    "run_json",
    "run_reason",
    "when",
    "zone_of",
]

_DAYS = {"1-5": "on weekdays", "0,6": "on weekends", "6,0": "on weekends", "*": "daily"}
_NUMBER = re.compile(r"\d{1,2}")
_STEP = re.compile(r"\*/(\d{1,2})")


def in_words(schedule: Schedule | None) -> str:
    """A short English reading of common schedules ("daily at 02:30", "every 5 minutes");
    "" when the expression says it better itself."""
    if schedule is None:
        return ""
    if isinstance(schedule, Every):
        return _interval_words(schedule.interval)
    if isinstance(schedule, At):
        return "once"
    fields = schedule.expr.split()
    if len(fields) != 5:
        return ""
    minute, hour, day, month, weekday = fields
    if (day, month, weekday) == ("*", "*", "*") and hour == "*":
        step = _STEP.fullmatch(minute)
        if minute == "*":
            return "every minute"
        if step:
            return f"every {step.group(1)} minutes"
        if _NUMBER.fullmatch(minute):
            return f"hourly at :{int(minute):02d}"
    if (
        _NUMBER.fullmatch(minute)
        and _NUMBER.fullmatch(hour)
        and (day, month) == ("*", "*")
        and weekday in _DAYS
    ):
        return f"{_DAYS[weekday]} at {int(hour):02d}:{int(minute):02d}"
    return ""


def _interval_words(seconds: int) -> str:
    for unit, size in (("day", 86400), ("hour", 3600), ("minute", 60)):
        if seconds % size == 0:
            count = seconds // size
            return f"every {unit}" if count == 1 else f"every {count} {unit}s"
    return f"every {seconds} seconds"


def iso(value: datetime | None) -> str | None:
    """An instant as ISO 8601 in UTC (``2026-12-01T01:30:00Z``), None for None."""
    if value is None:
        return None
    return value.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def zone_name(schedule: Schedule | None) -> str:
    """The zone a schedule's times are shown in: a cron schedule's own, else UTC."""
    return schedule.tz if isinstance(schedule, Cron) and zone_of(schedule) else "UTC"


def schedule_json(
    stored: StoredSchedule,
    state: str,
    reason: str,
    last_run: Mapping[Any, Any] | None,
) -> dict[str, Any]:
    """A schedule as the API returns it."""
    return {
        "name": stored.name,
        "task": stored.task,
        "state": state,
        "reason": reason,
        "schedule": describe(stored.schedule),
        "in_words": in_words(stored.schedule),
        "definition": None if stored.schedule is None else stored.schedule.to_dict(),
        "zone": zone_name(stored.schedule),
        "next_fire_at": iso(stored.next_fire_at),
        "paused": not stored.enabled,
        "paused_note": stored.paused_note,
        "paused_until": iso(stored.paused_until),
        "source": stored.source,
        "args": stored.args,
        "kwargs": stored.kwargs,
        "catchup": stored.policy.catchup,
        "overlap": stored.policy.overlap,
        "grace": stored.policy.grace,
        "starting_deadline": stored.policy.starting_deadline,
        **stored.bounds_json(),
        "error": stored.error,
        "last_run": None if last_run is None else run_json(last_run),
    }


def run_json(row: Mapping[Any, Any]) -> dict[str, Any]:
    """A run record as the API returns it (every time in UTC)."""
    return {
        "id": row["id"],
        "schedule": row["schedule"],
        "task": row["task_name"],
        "task_id": row["task_id"],
        "state": row["state"],
        "nominal_at": iso(row["nominal_at"]),
        "started_at": iso(row["started_at"]),
        "finished_at": iso(row["finished_at"]),
        "duration": row["duration"],
        "key": row["key"],
        "fence": row["fence"],
        "attempt": row["attempt"],
        "items": row["items"],
        "cursor": row["cursor"],
        "worker": row["worker"],
        "reason": run_reason(dict(row)),
    }


def run_detail_json(row: Mapping[Any, Any]) -> dict[str, Any]:
    """A run record as ``/api/runs/{id}`` returns it: :func:`run_json`'s fields, the
    error's type and message apart and as one line (``error``, None without one), what
    else the record knows, the delivery's ``args`` and ``kwargs`` and the ``traceback``
    as stored (bounded: see :mod:`celery_gaffer.runs.details`)."""
    return {
        **run_json(row),
        "error": run_reason(dict(row)) if row["error_type"] else None,
        "error_type": row["error_type"],
        "error_message": row["error_message"],
        "lease": row["lease"],
        "next_run_at": iso(row["next_run_at"]),
        "updated_at": iso(row["updated_at"]),
        "args": row["args"],
        "kwargs": row["kwargs"],
        "traceback": row["traceback"],
        "trace_id": row.get("trace_id"),
    }


def fire_json(row: Mapping[Any, Any]) -> dict[str, Any]:
    """A ledger fire as the API returns it."""
    return {
        "nominal_at": iso(row["nominal_at"]),
        "kind": row["kind"],
        "state": row["state"],
        "publish_count": row["publish_count"],
        "key": row["key"],
        "sent_at": iso(row["sent_at"]),
    }


def duration(seconds: float | None) -> str:
    """``1.25s``, ``2m 05s``, or ``-``."""
    if seconds is None:
        return "-"
    if seconds < 60:
        return f"{seconds:.2f}s"
    minutes, rest = divmod(int(seconds), 60)
    return f"{minutes}m {rest:02d}s"
