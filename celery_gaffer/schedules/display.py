"""How a schedule and its instants are written for people (the CLI, the console, previews).

An instant is shown in UTC (``2026-11-30 02:30:00Z``), or, for a cron schedule in a zone
other than UTC, on that zone's clock next to UTC (``2027-03-28 03:30 BST (02:30Z)``).
"""

from __future__ import annotations

from datetime import datetime, timezone, tzinfo

from .cron_engine import load_zone
from .kinds import At, Cron, Schedule

UTC = timezone.utc
# Zone names whose clock is UTC: shown as plain UTC.
_UTC_NAMES = frozenset({"UTC", "Etc/UTC", "Etc/Universal", "Universal", "Etc/Zulu", "Zulu"})


def zone_of(schedule: Schedule | None) -> tzinfo | None:
    """The zone a schedule's times are shown in: a cron schedule's zone other than UTC;
    None (UTC) for UTC, ``every`` and unreadable schedules."""
    if not isinstance(schedule, (Cron, At)) or schedule.tz in _UTC_NAMES:
        return None
    try:
        return load_zone(schedule.tz)
    except ValueError:  # InvalidSchedule: a zone this machine's tzdata does not know
        return None


def when(value: datetime | None, zone: tzinfo | None = None) -> str:
    """``value`` in UTC, or on ``zone``'s clock with its abbreviation and UTC in brackets
    (the UTC date too when it differs); seconds only when they are not zero."""
    if value is None:
        return "-"
    utc = value.astimezone(UTC)
    if zone is None:
        return utc.strftime("%Y-%m-%d %H:%M:%SZ")
    local = utc.astimezone(zone)
    clock = "%H:%M" if utc.second == 0 and utc.microsecond == 0 else "%H:%M:%S"
    utc_text = utc.strftime(clock if local.date() == utc.date() else f"%Y-%m-%d {clock}")
    return f"{local.strftime(f'%Y-%m-%d {clock}')} {local.tzname()} ({utc_text}Z)"


def describe(schedule: Schedule | None) -> str:
    """A schedule as the user would write it: ``cron '30 2 * * *' Europe/London`` or
    ``every 60s``, with its jitter; ``?`` for one that cannot be read."""
    if schedule is None:
        return "?"
    jitter = f", jitter {schedule.jitter:g}s" if schedule.jitter else ""
    if isinstance(schedule, Cron):
        return f"cron {schedule.expr!r} {schedule.tz}{jitter}"
    if isinstance(schedule, At):
        local = schedule.when.astimezone(load_zone(schedule.tz))
        return f"at {local.isoformat()} {schedule.tz}"
    return f"every {schedule.interval:g}s{jitter}"
