"""How the command line shows and reads instants.

Shown: in UTC (``2026-11-30 02:30:00Z``), or, for a cron schedule in a zone other than
UTC, on that zone's clock next to UTC (``2027-03-28 03:30 BST (02:30Z)``): ``when`` and
``zone_of`` live in :mod:`celery_gaffer.schedules.display` (the console and the previews
show instants the same way) and are re-exported here. Read: ISO 8601 with or without
seconds, a ``Z`` or an offset, or a plain date; naive means UTC (``parse_instant``, from
:mod:`celery_gaffer.readable`, which the console reads with too).
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta

import click

# Read the same way by the commands and the console.
from ..readable import parse_instant as parse_instant

# Shown the same way by every command, the console and the previews.
from ..schedules.display import when as when
from ..schedules.display import zone_of as zone_of


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


_DURATION = re.compile(r"(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?")


def duration_of(value: str) -> timedelta | None:
    """A duration such as ``2h``, ``30m``, ``1h30m``, ``1d``, ``45s``; None if ``value`` is
    not one."""
    found = _DURATION.fullmatch(value.strip().lower())
    if found is None or not any(found.groups()):
        return None
    days, hours, minutes, seconds = (int(part or 0) for part in found.groups())
    return timedelta(days=days, hours=hours, minutes=minutes, seconds=seconds)


def later_option(value: str, name: str, now: datetime) -> datetime:
    """The option ``name``'s time to come: a duration from ``now`` (``2h``, ``30m``) or an
    ISO 8601 time with an offset; a usage error otherwise."""
    duration = duration_of(value)
    if duration is not None:
        return now + duration
    try:
        return aware_option(value, name)
    except click.BadParameter:
        raise click.BadParameter(
            f"{value!r} is neither a duration (2h, 30m, 1h30m, 1d) nor an ISO 8601 time "
            "with an offset, such as 2026-12-24T09:00+01:00",
            param_hint=name,
        ) from None


def earlier_option(value: str, name: str, now: datetime) -> datetime:
    """The option ``name``'s past time: a duration before ``now`` (``2h``: two hours ago)
    or an instant as :func:`instant_option` reads it."""
    duration = duration_of(value)
    return now - duration if duration is not None else instant_option(value, name)


utc_option = click.option(
    "--utc", "in_utc", is_flag=True, help="Show every time in UTC (not in the schedule's zone)."
)
