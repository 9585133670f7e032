"""Schedule rows: from a validated spec to column values, and from a row to a
:class:`StoredSchedule`, decoding defensively so that a hand-corrupted row can be listed."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Table, Text, type_coerce

from ..exceptions import GafferError
from ..schedules.kinds import Cron, Every, schedule_from_dict
from ..schedules.spec import Policy, ScheduleSpec


def decode_json(value: Any) -> Any:
    """A JSON column read as raw text (SQLite) or already decoded (psycopg)."""
    if isinstance(value, (str, bytes, bytearray)):
        return json.loads(value)
    return value


@dataclass(frozen=True, slots=True)
class StoredSchedule:
    """A schedule as stored, with the state Beat keeps on it."""

    name: str
    task: str
    schedule: Cron | Every | None
    args: list[Any]
    kwargs: dict[str, Any]
    options: dict[str, Any]
    policy: Policy
    source: str
    watermark_at: datetime
    next_fire_at: datetime | None
    error: str | None
    updated_at: datetime

    @property
    def enabled(self) -> bool:
        return self.policy.enabled


def columns(spec: ScheduleSpec, watermark: datetime, now: datetime) -> dict[str, Any]:
    enabled = spec.policy.enabled
    next_fire_at = spec.schedule.next_after(watermark) if enabled else None
    return {
        "task": spec.task,
        "schedule": spec.schedule.to_dict(),
        "args": spec.args,
        "kwargs": spec.kwargs,
        "options": spec.options,
        "catchup": spec.policy.catchup,
        "starting_deadline": spec.policy.starting_deadline,
        "overlap": spec.policy.overlap,
        "grace": spec.policy.grace,
        "enabled": enabled,
        "watermark_at": watermark,
        "next_fire_at": next_fire_at,
        "check_at": next_fire_at,
        "error": None,
        "updated_at": now,
    }


def policy_dict(policy: Policy) -> dict[str, Any]:
    return {
        "catchup": policy.catchup,
        "starting_deadline": policy.starting_deadline,
        "overlap": policy.overlap,
        "grace": policy.grace,
        "enabled": policy.enabled,
    }


def differs(current: StoredSchedule, spec: ScheduleSpec) -> bool:
    return (
        current.task,
        current.schedule,
        current.args,
        current.kwargs,
        current.options,
        current.policy.catchup,
        current.policy.starting_deadline,
        current.policy.overlap,
        current.policy.grace,
    ) != (
        spec.task,
        spec.schedule,
        spec.args,
        spec.kwargs,
        spec.options,
        spec.policy.catchup,
        spec.policy.starting_deadline,
        spec.policy.overlap,
        spec.policy.grace,
    )


def readable_columns(table: Table) -> list[Any]:
    # JSON read as text, so that a hand-corrupted row can be listed and reported.
    json_columns = ("schedule", "args", "kwargs", "options")
    return [
        type_coerce(column, Text).label(column.name) if column.name in json_columns else column
        for column in table.c
    ]


def stored(row: Mapping[Any, Any]) -> StoredSchedule:
    error = row["error"]
    try:
        schedule: Cron | Every | None = schedule_from_dict(decode_json(row["schedule"]))
    except (GafferError, ValueError, TypeError) as exc:
        schedule, error = None, error or f"schedule: {exc}"
    decoded: dict[str, Any] = {}
    for column, kind in (("args", list), ("kwargs", dict), ("options", dict)):
        try:
            decoded[column] = kind(decode_json(row[column]) or kind())
        except (ValueError, TypeError) as exc:
            decoded[column], error = kind(), error or f"{column}: undecodable ({exc})"
    return StoredSchedule(
        name=row["name"],
        task=row["task"],
        schedule=schedule,
        args=decoded["args"],
        kwargs=decoded["kwargs"],
        options=decoded["options"],
        policy=Policy(
            catchup=row["catchup"],
            starting_deadline=row["starting_deadline"],
            overlap=row["overlap"],
            grace=row["grace"],
            enabled=row["enabled"],
        ),
        source=row["source"],
        watermark_at=row["watermark_at"],
        next_fire_at=row["next_fire_at"],
        error=error,
        updated_at=row["updated_at"],
    )
