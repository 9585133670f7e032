"""Validation of schedule entries, before anything is written.

Every failure is an :class:`~celery_gaffer.InvalidInput` (or, for the schedule itself,
:class:`~celery_gaffer.InvalidSchedule`) whose ``field`` names the offending input.
"""

from __future__ import annotations

import json
import math
import re
import string
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import timedelta
from typing import Any
from urllib.parse import urlsplit

from celery.schedules import crontab

from ..exceptions import InvalidInput
from ..protocol import (
    KEY_LENGTH,
    NAME_LENGTH,
    PING_URL_LENGTH,
    Catchup,
    FireHeaders,
    Overlap,
    loads_json,
)
from .bounds import BOUND_KEYS, Bounds, validate_bounds
from .calendars import validate_calendars
from .celery_beat import crontab_refusal
from .codecs import codec_problem
from .kinds import MAX_DELAY_SECONDS, Cron, Every, Schedule, as_schedule

CATCHUP_POLICIES = tuple(str(policy) for policy in Catchup)
OVERLAP_POLICIES = tuple(str(policy) for policy in Overlap)
_GAFFER_KEYS = (
    "catchup",
    "starting_deadline",
    "overlap",
    "grace",
    "enabled",
    *BOUND_KEYS,
    "ping_url",
    "skip_on",
    "on_skip",
)

#: Largest ``args``, ``kwargs`` or ``options`` of a schedule, as JSON text (bytes).
MAX_JSON_BYTES = 64 * 1024
#: Longest task name (the column's length).
TASK_LENGTH = 255
#: Longest queue, exchange or routing key.
ROUTE_LENGTH = 255
#: Celery send options a schedule may set on its messages. Every other option
#: (``task_id``, ``args``, ``serializer``, ``countdown``...) is refused: the scheduler sets
#: it, or it would break every fire.
SEND_OPTIONS = (
    "queue",
    "exchange",
    "routing_key",
    "priority",
    "expires",
    "headers",
    "time_limit",
    "soft_time_limit",
    "ignore_result",
    "retry",
    "retry_policy",
    "compression",
    "delivery_mode",
    "serializer",
)
# Message headers a schedule may not set: Celery's own protocol headers and Gaffer's.
RESERVED_HEADERS = frozenset(
    {
        "id",
        "task",
        "lang",
        "root_id",
        "parent_id",
        "group",
        "group_index",
        "retries",
        "eta",
        "expires",
        "timelimit",
        "argsrepr",
        "kwargsrepr",
        "origin",
        "shadow",
        "ignore_result",
        "replaced_task_nesting",
        "stamped_headers",
        "stamps",
        *(header for _, header in FireHeaders.NAMES),
    }
)
# Characters no name may hold: controls (NUL, newline...), format characters, lone
# surrogates (which do not encode), and line or paragraph separators.
_FORBIDDEN_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})


@dataclass(frozen=True, slots=True)
class Policy:
    """The per-schedule ``gaffer={...}`` options (docs/how-to/configure-beat.md)."""

    catchup: str = Catchup.LATEST
    starting_deadline: float | None = None
    overlap: str = Overlap.ALLOW
    grace: float | None = None
    enabled: bool = True
    bounds: Bounds = field(default_factory=Bounds)
    #: Pinged when a fire's run starts (``/start``), succeeds and fails (``/fail``).
    ping_url: str | None = None


# The policy of an entry without ``gaffer`` options (one immutable value for them all).
_DEFAULT_POLICY = Policy()


@dataclass(frozen=True, slots=True)
class ScheduleSpec:
    """A validated schedule entry, ready to be written."""

    name: str
    task: str
    schedule: Schedule
    args: list[Any] = field(default_factory=list)
    kwargs: dict[str, Any] = field(default_factory=dict)
    options: dict[str, Any] = field(default_factory=dict)
    policy: Policy = field(default_factory=Policy)
    #: The JSON text of ``args``, ``kwargs`` and ``options`` where validating them made
    #: it (``json.dumps`` of the value kept), else None: a bulk load writes it as it is.
    json_texts: tuple[str | None, str | None, str | None] = field(
        default=(None, None, None), compare=False, repr=False
    )


def printable_text(value: str, field_name: str) -> str:
    """``value`` if it holds no control, format or separator character (NUL, newline...)
    and encodes as UTF-8; else InvalidInput naming the field and the character."""
    if value.isprintable():
        # Every character of the forbidden categories is non-printable: the usual name
        # needs no walk through the Unicode database.
        return value
    for char in value:
        if unicodedata.category(char) in _FORBIDDEN_CATEGORIES:
            raise InvalidInput(
                f"{field_name}: must not contain the character U+{ord(char):04X}",
                field=field_name,
            )
    return value


def validate_name(name: Any, field_name: str = "name") -> str:
    if not isinstance(name, str) or not name.strip():
        raise InvalidInput(
            f"{field_name}: expected a non-empty string, got {name!r}", field=field_name
        )
    if len(name) > NAME_LENGTH:
        raise InvalidInput(
            f"{field_name}: {len(name)} characters is longer than {NAME_LENGTH}", field=field_name
        )
    printable_text(name, field_name)
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
    if _unstorable_text(key) is not None:
        # A key comes from the task's arguments: only what cannot be stored is refused.
        raise InvalidInput(
            f"{field_name}: holds NUL or a lone surrogate, which cannot be stored",
            field=field_name,
        )
    return key


def check_key_template(template: Any) -> str:
    """A ``gaffer_key`` template: ``str.format`` fields that name an argument (no
    ``{arg.attr}`` or ``{arg[0]}``, which run code of the argument's), with no nested
    field and no width above the longest key."""
    if not isinstance(template, str) or not template:
        raise InvalidInput(
            f"gaffer_key: expected a str.format template, got {template!r}", field="gaffer_key"
        )
    try:
        parts = list(string.Formatter().parse(template))
    except ValueError as exc:
        raise InvalidInput(f"gaffer_key: {template!r}: {exc}", field="gaffer_key") from exc
    for _literal, name, spec, _conversion in parts:
        if name is None:
            continue
        if not name.isidentifier():
            raise InvalidInput(
                f"gaffer_key: {{{name}}} must name an argument (no attributes, indexes or "
                "positions)",
                field="gaffer_key",
            )
        widths = [int(n) for n in re.findall(r"\d+", spec or "")]
        if "{" in (spec or "") or any(width > KEY_LENGTH for width in widths):
            raise InvalidInput(
                f"gaffer_key: {{{name}:{spec}}}: format specs may not nest or exceed "
                f"{KEY_LENGTH} characters",
                field="gaffer_key",
            )
    return template


def validate_task(task: Any, known_tasks: Mapping[str, Any] | None) -> str:
    if not isinstance(task, str) or not task.strip() or len(task) > TASK_LENGTH:
        raise InvalidInput(f"task: expected a task name, got {task!r}", field="task")
    printable_text(task, "task")
    if known_tasks is not None and task not in known_tasks:
        raise InvalidInput(f"task: {task!r} is not a task registered with this app", field="task")
    return task


# Values that read back from JSON as themselves (floats may not: -0.0, 1e400).
_PLAIN = frozenset({str, int, bool, type(None)})
# json.dumps(value, allow_nan=False), without building an encoder for every value.
_JSON_ENCODER = json.JSONEncoder(allow_nan=False)


def json_value(value: Any, field_name: str) -> Any:
    """``value`` as it will read back from the database, or InvalidInput naming the field."""
    return json_text(value, field_name)[0]


def json_text(value: Any, field_name: str) -> tuple[Any, str | None]:
    """:func:`json_value`, and the JSON text of what it returns when checking it made
    exactly that text (else None)."""
    kind = type(value)
    if kind in (list, dict) and not value:
        return kind(), None
    try:
        text = _JSON_ENCODER.encode(value)
    except (TypeError, ValueError, RecursionError) as exc:  # also an int of 4,300+ digits
        raise InvalidInput(
            f"{field_name}: not JSON-serialisable ({exc})", field=field_name
        ) from exc
    if len(text) > MAX_JSON_BYTES:  # ASCII: json.dumps escapes everything else
        raise InvalidInput(
            f"{field_name}: larger than {MAX_JSON_BYTES} bytes as JSON", field=field_name
        )
    # A flat list or str-keyed dict of plain values reads back as itself: a copy, no
    # round trip through the JSON decoder (a bulk load has one such value per entry).
    flat = _flat_plain(value, kind)
    decoded: Any = kind(value) if flat else loads_json(text, field_name)
    # The text is ASCII: a NUL or a lone surrogate in any string shows in it as \u0000
    # or \udXXX. Without either, there is nothing to look for.
    suspect = "\\u0000" in text or "\\ud" in text
    bad = _unstorable_text(decoded) if suspect else None
    if bad is not None:
        raise InvalidInput(
            f"{field_name}: {bad!r} holds NUL or a lone surrogate, which cannot be stored",
            field=field_name,
        )
    # A decoded value's own text may differ ({1: "a", "1": "b"} reads back as one key).
    return decoded, text if flat else None


def _flat_plain(value: Any, kind: type) -> bool:
    if kind is list:
        return all(type(item) in _PLAIN for item in value)
    if kind is dict:
        return all(type(k) is str and type(v) in _PLAIN for k, v in value.items())
    return False


def _unstorable_text(value: Any) -> str | None:
    """The first string of a decoded JSON value that PostgreSQL cannot store (NUL) or
    that does not encode (a lone surrogate), if any."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, str):
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                return item[:40]
            if "\x00" in item:
                return item[:40]
    return None


def validate_options(options: Any) -> dict[str, Any]:
    """A schedule's Celery send options: only :data:`SEND_OPTIONS`, each of its type."""
    if options is None:
        return {}
    if not isinstance(options, Mapping):
        raise InvalidInput(
            f"options: expected a dict, got {type(options).__name__}", field="options"
        )
    checked: dict[str, Any] = {}
    for name, value in options.items():
        where = f"options.{name}"
        if name not in SEND_OPTIONS:
            raise InvalidInput(
                f"{where}: not an option a schedule may set (allowed: {', '.join(SEND_OPTIONS)})",
                field=where,
            )
        if name in ("queue", "exchange", "routing_key"):
            if not isinstance(value, str) or not value or len(value) > ROUTE_LENGTH:
                raise InvalidInput(
                    f"{where}: expected a name of 1-{ROUTE_LENGTH} characters, got {value!r}",
                    field=where,
                )
            printable_text(value, where)
        elif name == "priority":
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 255:
                raise InvalidInput(f"{where}: expected 0-255, got {value!r}", field=where)
        elif name in ("expires", "time_limit", "soft_time_limit"):
            value = _optional_seconds(value, where)
        elif name in ("ignore_result", "retry"):
            if not isinstance(value, bool):
                raise InvalidInput(f"{where}: expected True or False, got {value!r}", field=where)
        elif name in ("serializer", "compression"):
            problem = codec_problem(name, value)
            if problem is not None:
                raise InvalidInput(problem, field=where)
        elif name == "delivery_mode":
            if value not in (1, 2, "transient", "persistent"):
                raise InvalidInput(
                    f"{where}: expected 1, 2, 'transient' or 'persistent', got {value!r}",
                    field=where,
                )
        elif name == "retry_policy":
            value = _retry_policy(value)
        else:  # headers
            value = _headers(value)
        checked[name] = value
    return checked


_RETRY_POLICY_KEYS = ("max_retries", "interval_start", "interval_step", "interval_max")


def _retry_policy(value: Any) -> dict[str, Any]:
    where = "options.retry_policy"
    if not isinstance(value, Mapping):
        raise InvalidInput(f"{where}: expected a dict, got {type(value).__name__}", field=where)
    for key, number in value.items():
        if key not in _RETRY_POLICY_KEYS:
            raise InvalidInput(
                f"{where}.{key}: unknown (known: {', '.join(_RETRY_POLICY_KEYS)})", field=where
            )
        if isinstance(number, bool) or not isinstance(number, (int, float)):
            raise InvalidInput(f"{where}.{key}: expected a number, got {number!r}", field=where)
        if not 0 <= number <= MAX_DELAY_SECONDS:
            raise InvalidInput(f"{where}.{key}: out of range: {number!r}", field=where)
    return dict(value)


def _headers(value: Any) -> dict[str, Any]:
    if not isinstance(value, Mapping):
        raise InvalidInput(
            f"options.headers: expected a dict, got {type(value).__name__}",
            field="options.headers",
        )
    for header in value:
        if not isinstance(header, str) or not header or len(header) > ROUTE_LENGTH:
            raise InvalidInput(
                f"options.headers: {header!r} is not a header name", field="options.headers"
            )
        printable_text(header, "options.headers")
        if header in RESERVED_HEADERS:
            raise InvalidInput(
                f"options.headers: {header!r} is set by Celery or celery-gaffer",
                field="options.headers",
            )
    return dict(value)


def validate_policy(gaffer: Mapping[str, Any] | None) -> Policy:
    if gaffer is None:
        return _DEFAULT_POLICY
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
        bounds=replace(validate_bounds(gaffer), calendar=validate_calendars(gaffer)),
        ping_url=_ping_url(gaffer.get("ping_url")),
    )


def _ping_url(value: Any) -> str | None:
    """An http(s) URL with a host, without spaces or control characters, or None."""
    if value is None:
        return None
    where = "gaffer.ping_url"
    if not isinstance(value, str) or not value.startswith(("http://", "https://")):
        raise InvalidInput(f"{where}: expected an http:// or https:// URL", field=where)
    if len(value) > PING_URL_LENGTH or any(c.isspace() for c in value):
        raise InvalidInput(
            f"{where}: at most {PING_URL_LENGTH} characters, without spaces", field=where
        )
    printable_text(value, where)
    try:
        parts = urlsplit(value)
        host, _port = parts.hostname, parts.port  # .port raises for a bad port
    except ValueError as exc:
        raise InvalidInput(f"{where}: not a valid URL ({exc})", field=where) from None
    if not host:
        raise InvalidInput(f"{where}: the URL has no host", field=where)
    return value


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
    if isinstance(schedule, crontab):
        raise crontab_refusal(schedule)
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
    options = validate_options(options)
    policy = validate_policy(gaffer)
    if policy.bounds.calendar is not None and not isinstance(parsed, (Cron, Every)):
        raise InvalidInput(
            "gaffer.skip_on: a one-off (at) schedule takes no calendar", field="gaffer.skip_on"
        )
    args, args_text = json_text(list(args), "args")
    kwargs, kwargs_text = json_text(dict(kwargs), "kwargs")
    options, options_text = json_text(dict(options), "options")
    return ScheduleSpec(
        name=name,
        task=task,
        schedule=parsed,
        args=args,
        kwargs=kwargs,
        options=options,
        policy=policy,
        json_texts=(args_text, kwargs_text, options_text),
    )


def _optional_seconds(value: Any, field_name: str, *, allow_zero: bool = False) -> float | None:
    if value is None:
        return None
    if isinstance(value, timedelta):
        value = value.total_seconds()
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise InvalidInput(f"{field_name}: expected seconds, got {value!r}", field=field_name)
    if value < 0 or (value == 0 and not allow_zero):
        raise InvalidInput(f"{field_name}: must be positive, got {value!r}", field=field_name)
    if value > MAX_DELAY_SECONDS:
        raise InvalidInput(
            f"{field_name}: at most {MAX_DELAY_SECONDS} s (a year), got {value!r}",
            field=field_name,
        )
    return float(value)
