"""What the command line and the web console both read from people and word for them:
an instant typed as ISO 8601, and why a run ended as it did.

It lives here, below both, so that the command line and the console say and read these
the same way without either importing the other. Pure: no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Any

__all__ = ["parse_instant", "run_reason"]

_EXAMPLES = "2026-11-30, 2026-11-30 21:30, 2026-11-30T21:30:00Z or 2026-11-30T21:30+01:00"
_ISO = re.compile(
    r"\d{4}-\d{2}-\d{2}"  # a date, then maybe a time: minutes, maybe seconds and fraction
    r"([T ]\d{2}:\d{2}(:\d{2}(\.\d{3}(\d{3})?)?)?(Z|[+-]\d{2}:\d{2})?)?"
)


def parse_instant(text: str) -> datetime:
    """An aware UTC datetime from ISO 8601 text: a date (its midnight), a time with or
    without seconds, ``T`` or a space between; naive is UTC. ValueError when not one."""
    cleaned = text.strip()
    if not _ISO.fullmatch(cleaned):
        raise ValueError(f"{text!r} is not an ISO time such as {_EXAMPLES}")
    if cleaned.endswith("Z"):
        cleaned = cleaned[:-1] + "+00:00"
    try:
        parsed = datetime.fromisoformat(cleaned)
    except ValueError as exc:  # matches the pattern, but out of range: month 13, say
        raise ValueError(f"{text!r} is not a valid time: {exc}") from exc
    if parsed.tzinfo is None:
        return parsed.replace(tzinfo=timezone.utc)
    return parsed.astimezone(timezone.utc)


def run_reason(row: Mapping[str, Any]) -> str:
    """``error_type: error_message``, or the message alone (why a run was skipped,
    duplicate, fence_lost, missed or lost), on one line; "" when there is neither."""
    message = " ".join((row["error_message"] or "").split())
    if row["error_type"]:
        return f"{row['error_type']}: {message}" if message else str(row["error_type"])
    return message
