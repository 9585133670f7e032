"""Keys of fires: the fire key, its Celery task id and its jitter delay. Pure functions.

Every Beat process computes the same values for the same fire, whatever the Python
version, platform or ``PYTHONHASHSEED``: that is what lets several Beats agree.
"""

from __future__ import annotations

import math
from datetime import datetime, timezone
from hashlib import blake2b
from uuid import NAMESPACE_URL, uuid5

from .exceptions import InvalidSchedule

__all__ = ["fire_key", "fire_task_id", "jitter_delay"]

# Domain separation, so that the jitter digest of a key is unrelated to other digests of it.
_JITTER_PERSON = b"gaffer-jitter"


def fire_key(schedule_name: str, nominal_at: datetime) -> str:
    """``"{schedule}@{nominal:%Y-%m-%dT%H:%M:%SZ}"``, the nominal time converted to UTC."""
    if not isinstance(nominal_at, datetime) or nominal_at.utcoffset() is None:
        raise InvalidSchedule(
            f"nominal_at must be a timezone-aware datetime, got {nominal_at!r}",
            field="nominal_at",
        )
    return f"{schedule_name}@{nominal_at.astimezone(timezone.utc):%Y-%m-%dT%H:%M:%SZ}"


def fire_task_id(key: str) -> str:
    """The Celery task id of a fire: ``str(uuid5(NAMESPACE_URL, "gaffer:" + key))``."""
    return str(uuid5(NAMESPACE_URL, "gaffer:" + key))


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
