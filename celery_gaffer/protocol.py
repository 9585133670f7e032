"""The message contract between Beat and workers, and the words both sides store.

Everything two processes must agree on lives here, as pure values and functions:

* a fire's key ``"{schedule}@{nominal:%Y-%m-%dT%H:%M:%SZ}"``, its Celery task id
  ``uuid5(NAMESPACE_URL, "gaffer:" + key)`` and its jitter delay, the same in every
  process whatever the Python version, platform or ``PYTHONHASHSEED`` (that is what lets
  several Beats agree);
* the message headers a fire carries (:class:`FireHeaders`), read back from Celery's
  request by the worker;
* the states of runs, fires and keys and the schedule policies, as string enums whose
  values are what the database stores;
* the lengths of the columns that user input must fit, and the one JSON decoder every
  text from outside (a form, a request body, a command-line option, a stored row) goes
  through (:func:`loads_json`), bounded in nesting depth.
"""

from __future__ import annotations

import enum
import json
import math
import sys
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from functools import lru_cache
from hashlib import blake2b, sha1
from typing import Any
from uuid import NAMESPACE_URL

from .exceptions import InvalidInput, InvalidSchedule

__all__ = [
    "ERROR_LENGTH",
    "FAILURE_STATES",
    "KEY_LENGTH",
    "MAX_JSON_DEPTH",
    "NAME_LENGTH",
    "NOMINAL_FORMAT",
    "PING_URL_LENGTH",
    "STORED_HEALTH",
    "Catchup",
    "FireHeaders",
    "FireKind",
    "FireState",
    "Health",
    "KeyState",
    "Overlap",
    "RunState",
    "fire_key",
    "fire_task_id",
    "format_nominal",
    "jitter_delay",
    "json_depth",
    "loads_json",
    "parse_nominal",
]

#: Longest schedule name (and lease name) a user may write.
NAME_LENGTH = 200
#: Longest idempotency key.
KEY_LENGTH = 512
#: Longest error message kept on a run record (longer ones are cut).
ERROR_LENGTH = 2000
#: Longest ping URL of a schedule, in characters.
PING_URL_LENGTH = 2048
#: Deepest nesting of lists and objects a JSON value may have (far below the depth at
#: which Python's decoder, encoder or a comparison of the value would run out of stack).
MAX_JSON_DEPTH = 64

#: How a nominal time is written in a fire's key and in its ``gaffer_nominal_at`` header.
NOMINAL_FORMAT = "%Y-%m-%dT%H:%M:%SZ"

if sys.version_info >= (3, 11):
    from enum import StrEnum
else:  # pragma: no cover - Python 3.10

    class StrEnum(str, enum.Enum):
        """``enum.StrEnum`` of Python 3.11: members are their values as strings."""

        def __str__(self) -> str:
            return str(self.value)


class RunState(StrEnum):
    """The state of one delivery in ``gaffer_job_runs``."""

    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    RETRYING = "retrying"
    REVOKED = "revoked"
    SKIPPED = "skipped"
    DUPLICATE = "duplicate"
    FENCE_LOST = "fence_lost"
    MISSED = "missed"
    LOST = "lost"


#: Run states that count towards ``gaffer_alert_after_failures``.
FAILURE_STATES = (RunState.FAILED, RunState.LOST)


class FireState(StrEnum):
    """The state of a fire in the ledger."""

    PENDING = "pending"  # inserted, not yet published (or its publisher died)
    SENT = "sent"
    DELIVERED = "delivered"  # a run record proves a worker started it
    UNCONFIRMED = "unconfirmed"  # published the most times and never started
    MISSED = "missed"  # older than its starting deadline: never sent
    CANCELLED = "cancelled"  # its schedule was removed before it was published
    SKIPPED = "skipped"  # on a date of one of its schedule's calendars (``reason`` says which)


class FireKind(StrEnum):
    """Why a fire exists."""

    SCHEDULED = "scheduled"
    MANUAL = "manual"  # gaffer trigger
    BACKFILL = "backfill"


class KeyState(StrEnum):
    """The state of an idempotency key."""

    CLAIMED = "claimed"  # a resumable run (batches) is under way
    COMPLETED = "completed"  # its effect is done: no other run may do it again


class Catchup(StrEnum):
    """What a tick sends of the fires missed while no Beat ran."""

    LATEST = "latest"
    ALL = "all"
    SKIP = "skip"


class Overlap(StrEnum):
    """Whether runs of one task (or of one schedule) may overlap."""

    ALLOW = "allow"
    FORBID = "forbid"
    REPLACE = "replace"


class Health(StrEnum):
    """A schedule's state word, as ``gaffer status`` prints it."""

    OK = "ok"
    LATE = "late"
    FAILING = "failing"
    PAUSED = "paused"
    ERROR = "error"


#: Health words stored on the schedule row (paused and error are derived from the row).
STORED_HEALTH = (Health.OK, Health.LATE, Health.FAILING)


def fire_key(schedule_name: str, nominal_at: datetime) -> str:
    """``"{schedule}@{nominal:%Y-%m-%dT%H:%M:%SZ}"``, the nominal time converted to UTC."""
    if not isinstance(nominal_at, datetime) or nominal_at.utcoffset() is None:
        raise InvalidSchedule(
            f"nominal_at must be a timezone-aware datetime, got {nominal_at!r}",
            field="nominal_at",
        )
    return f"{schedule_name}@{format_nominal(nominal_at)}"


def fire_task_id(key: str) -> str:
    """The Celery task id of a fire: ``str(uuid5(NAMESPACE_URL, "gaffer:" + key))``."""
    # uuid5 spelled out (RFC 4122 section 4.3), without building a UUID: one a fire.
    digest = bytearray(sha1(_TASK_ID_PREFIX + key.encode("utf-8")).digest()[:16])
    digest[6] = (digest[6] & 0x0F) | 0x50  # version 5
    digest[8] = (digest[8] & 0x3F) | 0x80  # the RFC 4122 variant
    h = digest.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


_TASK_ID_PREFIX = NAMESPACE_URL.bytes + b"gaffer:"


def format_nominal(nominal_at: datetime) -> str:
    """A nominal time as written in keys and headers (UTC, second precision)."""
    if type(nominal_at) is datetime and nominal_at.tzinfo is timezone.utc:
        # The fires of one second share their nominal time: formatted once. (Only a UTC
        # time is cached: two local times of a repeated hour are equal, and hash alike,
        # with different UTC times.)
        return _format_utc(nominal_at)
    return nominal_at.astimezone(timezone.utc).strftime(NOMINAL_FORMAT)


@lru_cache(maxsize=4096)
def _format_utc(nominal_at: datetime) -> str:
    return nominal_at.strftime(NOMINAL_FORMAT)


def parse_nominal(value: Any) -> datetime | None:
    """The nominal time of a ``gaffer_nominal_at`` header (None when absent or malformed)."""
    if not value:
        return None
    try:
        return datetime.strptime(str(value), NOMINAL_FORMAT).replace(tzinfo=timezone.utc)
    except ValueError:
        return None


# Domain separation, so that the jitter digest of a key is unrelated to other digests of it.
_JITTER_PERSON = b"gaffer-jitter"


def jitter_delay(key: str, jitter_seconds: float) -> float:
    """A delay in ``[0, jitter_seconds)`` derived from ``key`` alone (0.0 when no jitter).

    Spread evenly over the range for distinct keys; identical in every process.
    """
    if not math.isfinite(jitter_seconds) or jitter_seconds < 0:
        raise InvalidSchedule(
            f"jitter must be a finite number of seconds >= 0, got {jitter_seconds!r}",
            field="jitter",
        )
    if jitter_seconds == 0:
        return 0.0
    digest = blake2b(key.encode("utf-8"), digest_size=8, person=_JITTER_PERSON).digest()
    # 53 bits: every fraction is exactly representable as a float, and below 1.
    fraction = (int.from_bytes(digest, "big") >> 11) / float(1 << 53)
    delay = fraction * jitter_seconds
    # The product can round up to ``jitter_seconds`` itself; the range is half-open.
    return delay if delay < jitter_seconds else math.nextafter(jitter_seconds, 0.0)


@dataclass(frozen=True, slots=True)
class FireHeaders:
    """The message headers of a fire sent by the Gaffer scheduler.

    Celery copies message headers onto the task's request, so a worker reads them back
    with ``of``. A retry keeps them (``as_headers`` of the request's own).
    """

    schedule: str | None = None
    nominal_at: str | None = None  # NOMINAL_FORMAT
    key: str | None = None
    overlap: str | None = None  # sent only when not "allow"
    #: Celery's own header marking a Beat send (True), kept on retries too.
    beat_task: Any = None
    #: The schedule's ping URL (``gaffer={"ping_url": ...}``), sent only when it has one.
    ping: str | None = None

    #: Header name of each field.
    NAMES = (
        ("schedule", "gaffer_schedule"),
        ("nominal_at", "gaffer_nominal_at"),
        ("key", "gaffer_key"),
        ("overlap", "gaffer_overlap"),
        ("beat_task", "celery_beat_task"),
        ("ping", "gaffer_ping"),
    )

    @classmethod
    def for_fire(
        cls,
        schedule: str,
        nominal_at: datetime,
        key: str,
        overlap: str = Overlap.ALLOW,
        ping: str | None = None,
    ) -> FireHeaders:
        return cls(
            schedule=schedule,
            nominal_at=format_nominal(nominal_at),
            key=key,
            overlap=None if overlap == Overlap.ALLOW else str(overlap),
            beat_task=True,
            ping=ping,
        )

    @classmethod
    def of(cls, request: Any) -> FireHeaders:
        """The headers on a Celery request (or a message's header dict)."""
        if isinstance(request, dict):
            return cls(*(request.get(header) for _, header in cls.NAMES))
        # Spelled out: a run reads its headers a few times, and this is its hot path.
        return cls(
            getattr(request, "gaffer_schedule", None),
            getattr(request, "gaffer_nominal_at", None),
            getattr(request, "gaffer_key", None),
            getattr(request, "gaffer_overlap", None),
            getattr(request, "celery_beat_task", None),
            getattr(request, "gaffer_ping", None),
        )

    def as_headers(self) -> dict[str, Any]:
        """The headers that are set, by header name."""
        headers = {}
        for name, header in self.NAMES:
            value = getattr(self, name)
            if value is not None:
                headers[header] = value
        return headers

    @property
    def nominal(self) -> datetime | None:
        return parse_nominal(self.nominal_at)


def loads_json(
    text: str | bytes | bytearray,
    field: str,
    object_hook: Callable[[dict[str, Any]], Any] | None = None,
) -> Any:
    """The value of a JSON text, or :class:`~celery_gaffer.InvalidInput` naming ``field``:
    not JSON, not UTF-8, or nested deeper than :data:`MAX_JSON_DEPTH` (one line, whatever
    the text: a deep text never reaches the caller as a ``RecursionError``).

    ``object_hook``: as :func:`json.loads`'s (an importer's tagged objects); a
    ``ValueError`` it raises is reported as not valid JSON, anything else propagates."""
    try:
        value = json.loads(text, object_hook=object_hook)
    except RecursionError:
        value = _TOO_DEEP
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError
        reason = " ".join(str(exc).split())[:200]
        raise InvalidInput(f"{field}: not valid JSON ({reason})", field=field) from None
    if len(text) <= MAX_JSON_DEPTH:  # too short to nest that deep
        return value
    # Most texts have fewer brackets than the limit: counted in C, no walk needed.
    if isinstance(text, str):
        brackets = text.count("[") + text.count("{")
    else:
        brackets = text.count(b"[") + text.count(b"{")
    if value is _TOO_DEEP or (brackets > MAX_JSON_DEPTH and json_depth(value) > MAX_JSON_DEPTH):
        raise InvalidInput(f"{field}: JSON nested deeper than {MAX_JSON_DEPTH} levels", field=field)
    return value


_TOO_DEEP = object()


def json_depth(value: Any) -> int:
    """How deeply lists and dicts nest in ``value`` (0 for a scalar), without recursion."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            item = item.values()
        elif not isinstance(item, (list, tuple)):
            continue
        depth += 1
        deepest = max(deepest, depth)
        stack.extend((child, depth) for child in item)
    return deepest
