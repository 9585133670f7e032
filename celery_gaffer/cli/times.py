"""How the command line shows and reads instants.

Shown: in UTC (``2026-11-30 02:30:00Z``), or, for a cron schedule in a zone other than
UTC, on that zone's clock next to UTC (``2027-03-28 03:30 BST (02:30Z)``): ``when`` and
``zone_of`` live in :mod:`celery_gaffer.schedules.display` (the console and the previews
show instants the same way) and are re-exported here. Read: ISO 8601 with or without
seconds, a ``Z`` or an offset, or a plain date; naive means UTC.
"""

from __future__ import annotations

import re
from datetime import datetime

import click

# Shown the same way by every command, the console and the previews.
from ..schedules.display import UTC
from ..schedules.display import when as when
from ..schedules.display import zone_of as zone_of

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
        return parsed.replace(tzinfo=UTC)
    return parsed.astimezone(UTC)


def instant_option(value: str, name: str) -> datetime:
    """The option ``name``'s value read by :func:`parse_instant`, or a usage error."""
    try:
        return parse_instant(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint=name) from exc


def aware_option(value: str, name: str) -> datetime:
    """The option ``name``'s ISO 8601 time, which must carry an offset (or ``Z``): a wall
    time alone would be ambiguous around DST. A usage error otherwise."""
    text = value.strip()
    try:
        parsed = datetime.fromisoformat(text[:-1] + "+00:00" if text.endswith("Z") else text)
    except ValueError:
        parsed = None
    if parsed is None or parsed.utcoffset() is None:
        raise click.BadParameter(
            f"{value!r} is not an ISO 8601 time with an offset, such as 2026-12-24T09:00+01:00",
            param_hint=name,
        )
    return parsed


utc_option = click.option(
    "--utc", "in_utc", is_flag=True, help="Show every time in UTC (not in the schedule's zone)."
)
