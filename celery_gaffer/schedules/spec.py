"""Validation of schedule entries, before anything is written.

Every failure is an :class:`~celery_gaffer.InvalidInput` (or, for the schedule itself,
:class:`~celery_gaffer.InvalidSchedule`) whose ``field`` names the offending input.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..exceptions import InvalidInput
from ..protocol import KEY_LENGTH, NAME_LENGTH, Catchup, Overlap
from .kinds import Cron, Every, as_schedule

CATCHUP_POLICIES = tuple(str(policy) for policy in Catchup)
OVERLAP_POLICIES = tuple(str(policy) for policy in Overlap)
_GAFFER_KEYS = ("catchup", "starting_deadline", "overlap", "grace", "enabled")


@dataclass(frozen=True, slots=True)
class Policy:
    """The per-schedule ``gaffer={...}`` options (docs/how-to/configure-beat.md)."""

    catchup: str = Catchup.LATEST
    starting_deadline: float | None = None
    overlap: str = Overlap.ALLOW
    grace: float | None = None
    enabled: bool = True


@dataclass(frozen=True, slots=True)
class ScheduleSpec:
    """A validated schedule entry, ready to be written."""

    name: str
    task: str
    schedule: Cron | Every
    args: list[Any] = field(default_factory=list)
    kwargs: dict[str, Any] = field(default_factory=dict)
    options: dict[str, Any] = field(default_factory=dict)
    policy: Policy = field(default_factory=Policy)


def validate_name(name: Any, field_name: str = "name") -> str:
    if not isinstance(name, str) or not name.strip():
        raise InvalidInput(
            f"{field_name}: expected a non-empty string, got {name!r}", field=field_name
        )
    if len(name) > NAME_LENGTH:
        raise InvalidInput(
            f"{field_name}: {len(name)} characters is longer than {NAME_LENGTH}", field=field_name
        )
    if "@" in name:
        # '@' separates the schedule from the nominal time in a fire's key.
        raise InvalidInput(f"{field_name}: {name!r} must not contain '@'", field=field_name)
    return name


def validate_key(key: Any, field_name: str = "key") -> str:
    if not isinstance(key, str) or not key:
        raise InvalidInput(
            f"{field_name}: expected a non-empty string, got {key!r}", field=field_name
        )
    if len(key) > KEY_LENGTH:
        raise InvalidInput(
            f"{field_name}: {len(key)} characters is longer than {KEY_LENGTH}", field=field_name
        )
    return key


def validate_task(task: Any, known_tasks: Mapping[str, Any] | None) -> str:
    if not isinstance(task, str) or not task.strip() or len(task) > 255:
        raise InvalidInput(f"task: expected a task name, got {task!r}", field="task")
    if known_tasks is not None and task not in known_tasks:
        raise InvalidInput(f"task: {task!r} is not a task registered with this app", field="task")
    return task


def json_value(value: Any, field_name: str) -> Any:
    """``value`` as it will read back from the database, or InvalidInput naming the field."""
    try:
        return json.loads(json.dumps(value, allow_nan=False))
    except (TypeError, ValueError) as exc:
        raise InvalidInput(
            f"{field_name}: not JSON-serialisable ({exc})", field=field_name
        ) from exc


def validate_policy(gaffer: Mapping[str, Any] | None) -> Policy:
    if gaffer is None:
        return Policy()
    if not isinstance(gaffer, Mapping):
        raise InvalidInput(f"gaffer: expected a dict, got {gaffer!r}", field="gaffer")
    unknown = sorted(set(gaffer) - set(_GAFFER_KEYS))
    if unknown:
        raise InvalidInput(
            f"gaffer.{unknown[0]}: unknown option (known: {', '.join(_GAFFER_KEYS)})",
            field=f"gaffer.{unknown[0]}",
        )
    catchup = gaffer.get("catchup", Catchup.LATEST)
    if catchup not in CATCHUP_POLICIES:
        raise InvalidInput(
            f"gaffer.catchup: {catchup!r} is not one of {', '.join(CATCHUP_POLICIES)}",
            field="gaffer.catchup",
        )
    overlap = gaffer.get("overlap", Overlap.ALLOW)
    if overlap not in OVERLAP_POLICIES:
        raise InvalidInput(
            f"gaffer.overlap: {overlap!r} is not one of {', '.join(OVERLAP_POLICIES)}",
            field="gaffer.overlap",
        )
    enabled = gaffer.get("enabled", True)
    if not isinstance(enabled, bool):
        raise InvalidInput(
            f"gaffer.enabled: expected True or False, got {enabled!r}", field="gaffer.enabled"
        )
    return Policy(
        catchup=catchup,
        starting_deadline=_optional_seconds(
            gaffer.get("starting_deadline"), "gaffer.starting_deadline"
        ),
        overlap=overlap,
        grace=_optional_seconds(gaffer.get("grace"), "gaffer.grace", allow_zero=True),
        enabled=enabled,
    )


def validate_entry(
    *,
    name: Any,
    task: Any,
    schedule: Any,
    args: Any = (),
    kwargs: Any = None,
    options: Any = None,
    gaffer: Mapping[str, Any] | None = None,
    known_tasks: Mapping[str, Any] | None = None,
) -> ScheduleSpec:
    """Validate one schedule entry; raise a GafferError naming the first bad field."""
    name = validate_name(name)
    task = validate_task(task, known_tasks)
    parsed = as_schedule(schedule)
    if args is None:
        args = ()
    if not isinstance(args, (list, tuple)):
        raise InvalidInput(
            f"args: expected a list or tuple, got {type(args).__name__}", field="args"
        )
    kwargs = {} if kwargs is None else kwargs
    if not isinstance(kwargs, Mapping):
        raise InvalidInput(f"kwargs: expected a dict, got {type(kwargs).__name__}", field="kwargs")
    options = {} if options is None else options
    if not isinstance(options, Mapping):
        raise InvalidInput(
            f"options: expected a dict, got {type(options).__name__}", field="options"
        )
    return ScheduleSpec(
        name=name,
        task=task,
        schedule=parsed,
        args=json_value(list(args), "args"),
        kwargs=json_value(dict(kwargs), "kwargs"),
        options=json_value(dict(options), "options"),
        policy=validate_policy(gaffer),
    )


def _optional_seconds(value: Any, field_name: str, *, allow_zero: bool = False) -> float | None:
    if value is None:
        return None
    if hasattr(value, "total_seconds"):
        value = value.total_seconds()
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise InvalidInput(f"{field_name}: expected seconds, got {value!r}", field=field_name)
    if value < 0 or (value == 0 and not allow_zero):
        raise InvalidInput(f"{field_name}: must be positive, got {value!r}", field=field_name)
    return float(value)
