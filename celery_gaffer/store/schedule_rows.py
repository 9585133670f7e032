"""Schedule rows: from a validated spec to column values, and from a row to a
:class:`StoredSchedule`, decoding defensively so that a hand-corrupted row can be listed."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Table, Text, cast

from ..exceptions import GafferError, InvalidInput
from ..protocol import loads_json
from ..schedules import watermarks
from ..schedules.bounds import Bounds
from ..schedules.calendars import rule_options, stored_rule
from ..schedules.kinds import Schedule, schedule_from_dict
from ..schedules.spec import Policy, ScheduleSpec
from ..settings import masked_ping_url
from .copying import JSONText


def decode_json(value: Any, field: str = "value") -> Any:
    """A JSON column read as text (:func:`~celery_gaffer.protocol.loads_json`: InvalidInput,
    a ValueError, naming ``field`` when it is not JSON or nests too deeply), or a value
    the driver already decoded."""
    if isinstance(value, (str, bytes, bytearray)):
        return loads_json(value, field)
    return value


@dataclass(frozen=True, slots=True)
class StoredSchedule:
    """A schedule as stored, with the state Beat keeps on it."""

    name: str
    task: str
    schedule: Schedule | None
    args: list[Any]
    kwargs: dict[str, Any]
    options: dict[str, Any]
    policy: Policy
    source: str
    watermark_at: datetime
    next_fire_at: datetime | None
    error: str | None
    updated_at: datetime
    #: Scheduled fires sent so far (what ``max_runs`` counts).
    fired_count: int = 0
    #: Why it was paused (the pause's note), while paused.
    paused_note: str | None = None
    #: When Beat resumes it by itself (None: only ``resume`` does), while paused.
    paused_until: datetime | None = None

    @property
    def enabled(self) -> bool:
        return self.policy.enabled

    @property
    def standing(self) -> watermarks.Standing:
        """What the watermark rules (:mod:`~celery_gaffer.schedules.watermarks`) read."""
        return watermarks.Standing(
            self.schedule, self.policy, self.watermark_at, self.fired_count, self.error
        )

    @property
    def finished(self) -> bool:
        """Enabled, readable and without error, but its bounds leave it nothing to fire."""
        return watermarks.done(self.standing)

    def bounds_json(self) -> dict[str, Any]:
        """Its bounds, count of fires sent and ping URL (masked), JSON-able (for ``--json``
        and the API)."""
        bounds, url = self.policy.bounds, self.policy.ping_url
        return {
            "start_at": None if bounds.start_at is None else bounds.start_at.isoformat(),
            "end_at": None if bounds.end_at is None else bounds.end_at.isoformat(),
            "max_runs": bounds.max_runs,
            "fired_count": self.fired_count,
            "done": self.finished,
            "ping_url": None if url is None else masked_ping_url(url),
        }


class Timings:
    """A memo of :func:`columns`' per-schedule work (its JSON text and next fire) for a
    bulk load: tenants' schedules repeat a few timings many times. The rows made with it
    hold their JSON columns as text (:class:`~.copying.JSONText`), serialised once."""

    def __init__(self) -> None:
        self._seen: dict[tuple[Any, ...], tuple[JSONText, datetime | None]] = {}

    def of(
        self, spec: ScheduleSpec, watermark: datetime, fired: int
    ) -> tuple[JSONText, datetime | None]:
        key = (spec.schedule, spec.policy.bounds, spec.policy.enabled, watermark, fired)
        found = self._seen.get(key)
        if found is None:
            if len(self._seen) >= 100_000:
                self._seen.clear()
            timing, next_fire_at = _timing(spec, watermark, fired)
            found = self._seen[key] = (JSONText(json.dumps(timing)), next_fire_at)
        return found


def _timing(
    spec: ScheduleSpec, watermark: datetime, fired: int
) -> tuple[dict[str, Any], datetime | None]:
    return spec.schedule.to_dict(), watermarks.next_fire(spec, watermarks.Start(watermark, fired))


def columns(
    spec: ScheduleSpec,
    watermark: datetime,
    now: datetime,
    fired: int = 0,
    timings: Timings | None = None,
) -> dict[str, Any]:
    """The columns of ``spec`` starting from ``watermark``, having sent ``fired`` fires
    (both decided by :mod:`~celery_gaffer.schedules.watermarks`; ``timings``: a memo
    shared by the rows of a bulk load, whose JSON columns are then text)."""
    enabled = spec.policy.enabled
    args: Any = spec.args
    kwargs: Any = spec.kwargs
    options: Any = spec.options
    timing: Any
    if timings is None:
        timing, next_fire_at = _timing(spec, watermark, fired)
    else:
        timing, next_fire_at = timings.of(spec, watermark, fired)
        args_text, kwargs_text, options_text = spec.json_texts
        args, kwargs, options = (
            _text(args, args_text),
            _text(kwargs, kwargs_text),
            _text(options, options_text),
        )
    bounds = spec.policy.bounds
    return {
        "task": spec.task,
        "schedule": timing,
        "args": args,
        "kwargs": kwargs,
        "options": options,
        "catchup": spec.policy.catchup,
        "starting_deadline": spec.policy.starting_deadline,
        "overlap": spec.policy.overlap,
        "grace": spec.policy.grace,
        "enabled": enabled,
        "start_at": bounds.start_at,
        "end_at": bounds.end_at,
        "max_runs": bounds.max_runs,
        "ping_url": spec.policy.ping_url,
        **_calendar_columns(spec, bulk=timings is not None),
        "watermark_at": watermark,
        "next_fire_at": next_fire_at,
        "check_at": next_fire_at,
        "error": None,
        "updated_at": now,
    }


def _calendar_columns(spec: ScheduleSpec, *, bulk: bool) -> dict[str, Any]:
    found = rule_options(spec.policy.bounds.calendar)
    if bulk and found["skip_on"] is not None:
        found["skip_on"] = JSONText(json.dumps(found["skip_on"]))
    return found


def _text(value: list[Any] | dict[str, Any], known: str | None) -> JSONText:
    """The JSON text of ``value``: ``known`` (validation's) when it made it."""
    if known is not None:
        return JSONText(known)
    if not value:
        return _EMPTY_ARRAY if type(value) is list else _EMPTY_OBJECT
    return JSONText(json.dumps(value))


_EMPTY_ARRAY = JSONText("[]")
_EMPTY_OBJECT = JSONText("{}")


def policy_dict(policy: Policy) -> dict[str, Any]:
    return {
        "catchup": policy.catchup,
        "starting_deadline": policy.starting_deadline,
        "overlap": policy.overlap,
        "grace": policy.grace,
        "enabled": policy.enabled,
        "start_at": policy.bounds.start_at,
        "end_at": policy.bounds.end_at,
        "max_runs": policy.bounds.max_runs,
        "ping_url": policy.ping_url,
        **rule_options(policy.bounds.calendar),
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
        current.policy.bounds,
        current.policy.ping_url,
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
        spec.policy.bounds,
        spec.policy.ping_url,
    )


def readable_columns(table: Table) -> list[Any]:
    # JSON read as text (a CAST: psycopg would decode it itself, unbounded), so that a
    # hand-corrupted row can be listed and reported.
    json_columns = ("schedule", "args", "kwargs", "options", "skip_on")
    return [
        cast(column, Text).label(column.name) if column.name in json_columns else column
        for column in table.c
    ]


def stored(row: Mapping[Any, Any]) -> StoredSchedule:
    error = row["error"]
    try:
        definition = decode_json(row["schedule"], "schedule")
    except InvalidInput as exc:  # names the column already
        schedule: Schedule | None = None
        error = error or str(exc)
    else:
        try:
            schedule = schedule_from_dict(definition)
        except (GafferError, ValueError, TypeError) as exc:
            schedule, error = None, error or f"schedule: {exc}"
    decoded: dict[str, Any] = {}
    for column, kind in (("args", list), ("kwargs", dict), ("options", dict)):
        try:
            decoded[column] = kind(decode_json(row[column], column) or kind())
        except InvalidInput as exc:
            decoded[column], error = kind(), error or str(exc)
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
            bounds=Bounds(row["start_at"], row["end_at"], row["max_runs"], _stored_calendar(row)),
            ping_url=row["ping_url"],
        ),
        source=row["source"],
        watermark_at=row["watermark_at"],
        next_fire_at=row["next_fire_at"],
        error=error,
        updated_at=row["updated_at"],
        fired_count=int(row["fired_count"] or 0),
        paused_note=row.get("paused_note"),
        paused_until=row.get("paused_until"),
    )


def _stored_calendar(row: Mapping[Any, Any]) -> Any:
    """A row's calendar rule; None when it has none or its ``skip_on`` is unreadable."""
    try:
        skip_on = decode_json(row.get("skip_on"), "skip_on")
    except ValueError:
        return None
    return stored_rule(skip_on, row.get("on_skip"))
