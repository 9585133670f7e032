"""Celery's own schedule objects (``crontab``, ``schedule``, ``solar``) as Gaffer schedules.

A translation is exact or refused, never approximate: :func:`translate` returns the Gaffer
schedule (with a note where the fire times may differ: DST days, see docs/dst.md) or
raises :class:`Untranslatable` with the reason.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from celery.schedules import crontab, solar
from celery.schedules import schedule as celery_schedule

from ..exceptions import GafferError, InvalidSchedule
from .kinds import Cron, Every, Schedule, cron, every

_FULL = {
    "minute": set(range(60)),
    "hour": set(range(24)),
    "day_of_month": set(range(1, 32)),
    "month_of_year": set(range(1, 13)),
    "day_of_week": set(range(7)),
}
_STARTS = {"minute": 0, "hour": 0, "day_of_month": 1, "month_of_year": 1, "day_of_week": 0}
# How many years of a zone's clock changes are looked at for the DST note.
_DST_YEARS = 3


class Untranslatable(GafferError):
    """A Celery schedule Gaffer cannot express exactly; the message says why."""


@dataclass(frozen=True, slots=True)
class Translation:
    """A Gaffer schedule equal to a Celery one, and a note when fires may differ."""

    schedule: Schedule
    note: str | None = None


def translate(value: object, tz: str = "UTC") -> Translation:
    """The Gaffer schedule of ``value`` (a beat_schedule entry's ``schedule``).

    ``tz`` is the app's zone (``app.conf.timezone``), where Celery evaluates a crontab.
    Raises :class:`Untranslatable` for a solar event, a crontab that matches day of
    month AND day of week, or anything else that is not a schedule.
    """
    if isinstance(value, (Cron, Every)):
        return Translation(value)
    if isinstance(value, (int, float, timedelta)) and not isinstance(value, bool):
        return Translation(_every(value))
    if isinstance(value, solar):
        raise Untranslatable("solar events are not supported", field="schedule")
    if isinstance(value, crontab):
        expr = cron_expression(value)
        return Translation(cron(expr, tz), dst_note(value, tz))
    if isinstance(value, celery_schedule):  # crontab and solar are subclasses: after them
        return Translation(_every(value.run_every))
    raise Untranslatable(
        f"not a Celery or Gaffer schedule: {type(value).__name__}", field="schedule"
    )


def _every(value: float | timedelta) -> Every:
    seconds = value.total_seconds() if isinstance(value, timedelta) else float(value)
    if seconds != int(seconds):
        raise Untranslatable(
            f"every: Gaffer intervals are whole seconds, got {seconds} s", field="schedule"
        )
    return every(int(seconds))


def cron_expression(value: crontab) -> str:
    """The five-field cron expression matching what ``value`` matches, compactly written.

    Raises :class:`Untranslatable` when both day of month and day of week are restricted:
    Celery matches days where both hold, cron where either does.
    """
    days = [name for name in ("day_of_month", "day_of_week") if _restricted(value, name)]
    if len(days) == 2:
        raise Untranslatable(
            "Celery's crontab matches day_of_month AND day_of_week when both are "
            "restricted, cron matches either (OR)",
            field="schedule",
        )
    names = ("minute", "hour", "day_of_month", "month_of_year", "day_of_week")
    return " ".join(_field(set(getattr(value, name)), name) for name in names)


def suggestion(value: crontab) -> str:
    """The ``cron(...)`` line to write instead of ``value`` (the app's zone from Celery)."""
    tz = zone_name(value.tz)
    expr = cron_expression(value)
    return f'cron("{expr}")' if tz == "UTC" else f'cron("{expr}", "{tz}")'


def crontab_call(value: crontab) -> str:
    """``value`` as the call that made it, e.g. ``crontab(minute=30, hour=2)``."""
    # The fields as given, by the pickle protocol's public hook (crontab's own
    # arguments, in its constructor's order).
    given = value.__reduce__()[1]
    parts = []
    names = ("minute", "hour", "day_of_week", "day_of_month", "month_of_year")
    for name, field in zip(names, given, strict=False):
        text = str(field)
        if text != "*":
            parts.append(f"{name}={text}" if text.isdigit() else f"{name}={text!r}")
    return f"crontab({', '.join(parts)})"


def crontab_refusal(value: crontab) -> InvalidSchedule:
    """Why a Celery ``crontab`` is refused, with the ``cron(...)`` line to use instead."""
    try:
        line = suggestion(value)
    except Untranslatable as exc:
        return InvalidSchedule(
            f"{crontab_call(value)} is a Celery crontab Gaffer cannot express: {exc}",
            field="schedule",
        )
    return InvalidSchedule(
        f"use {line} instead of {crontab_call(value)}: Celery's crontab has different DST "
        "behaviour (or run `celery -A proj gaffer import beat-schedule`)",
        field="schedule",
    )


def zone_name(tz: object) -> str:
    """An IANA name for a zone object of Celery's (``app.timezone``, ``crontab.tz``)."""
    key = getattr(tz, "key", None) or getattr(tz, "zone", None) or str(tz)
    return "UTC" if key in ("UTC", "utc", "Etc/UTC") else str(key)


def _restricted(value: crontab, name: str) -> bool:
    return set(getattr(value, name)) != _FULL[name]


def _field(values: set[int], name: str) -> str:
    full = _FULL[name]
    if values == full:
        return "*"
    start = _STARTS[name]
    top = max(full)
    ordered = sorted(values)
    for step in range(2, (top - start) // 2 + 1):  # at least three values: */n
        if ordered[0] == start and set(range(start, top + 1, step)) == values:
            return f"*/{step}"
    return ",".join(_runs(ordered))


def _runs(ordered: list[int]) -> Iterable[str]:
    run = [ordered[0]]
    for item in [*ordered[1:], -2]:
        if item == run[-1] + 1:
            run.append(item)
            continue
        if len(run) >= 3:
            yield f"{run[0]}-{run[-1]}"
        else:
            yield from (str(x) for x in run)
        run = [item]


def dst_note(value: crontab, tz: str) -> str | None:
    """What may differ on DST days when ``value`` (evaluated by Celery in ``tz``) runs
    as a Gaffer cron; None when it matches no wall time a clock change skips or repeats."""
    try:
        zone = ZoneInfo(tz)
    except (ZoneInfoNotFoundError, ValueError):
        return None
    months = set(value.month_of_year)
    times = {h * 60 + m for h in value.hour for m in value.minute}
    touched = sorted(
        {
            f"{kind} {start // 60:02d}:{start % 60:02d}-{end // 60:02d}:{end % 60:02d}"
            for month, kind, start, end in clock_changes(zone)
            if month in months and any(start <= t < end for t in times)
        },
        reverse=True,  # "skip ..." before "repeat ...", as the year goes
    )
    if not touched:
        return None
    return (
        f"touches local times that clock changes in {tz} {' or '.join(touched)}: fire "
        "times on those days may differ from Celery's (Gaffer follows docs/dst.md)"
    )


def clock_changes(zone: ZoneInfo) -> set[tuple[int, str, int, int]]:
    """(month, 'skip' or 'repeat', first minute, end minute) of the local wall times
    the clock changes of ``zone`` skip or repeat, this year and the next few."""
    year = datetime.now(timezone.utc).year
    t = datetime(year, 1, 1, tzinfo=timezone.utc)
    end = datetime(year + _DST_YEARS, 1, 1, tzinfo=timezone.utc)
    changes: set[tuple[int, str, int, int]] = set()
    before = t.astimezone(zone).utcoffset()
    while t < end:
        after_t = t + timedelta(minutes=30)
        after = after_t.astimezone(zone).utcoffset()
        if after != before and before is not None and after is not None:
            # Find the instant of the change to the minute.
            lo, hi = t, after_t
            while hi - lo > timedelta(minutes=1):
                mid = lo + (hi - lo) / 2
                if mid.astimezone(zone).utcoffset() == before:
                    lo = mid
                else:
                    hi = mid
            local_new = hi.astimezone(zone)
            shift = int((after - before).total_seconds() // 60)
            at = local_new.hour * 60 + local_new.minute
            if shift > 0:
                changes.add((local_new.month, "skip", at - shift, at))
            else:
                changes.add((local_new.month, "repeat", at, at - shift))
        before = after
        t = after_t
    return changes
