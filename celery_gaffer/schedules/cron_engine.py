"""Cron evaluation in an IANA zone: cronsim matches wall-clock time, this module maps it to UTC.

cronsim is used only on naive local wall-clock time, where it is plain cron: no zone, no
DST. Mapping each matching wall-clock minute to real instants is done here with
``zoneinfo``, by the rules of docs/dst.md (Debian cron's):

* a wall time that exists once fires at that instant;
* a wall time in a spring-forward gap: a fixed-time schedule fires once at the instant the
  gap ends (all of one gap's matches coalesce), a wildcard schedule does not fire;
* a wall time that happens twice: a fixed-time schedule fires at the first occurrence, a
  wildcard schedule at both.

cronsim's own zone mode is not used because it breaks these rules in places (see
docs/dst.md): with 30-minute shifts (Australia/Lord_Howe) wildcard schedules skip real
fires, and a gap that ends off the minute (Africa/Monrovia 1972) is rounded to the minute.
"""

from __future__ import annotations

import copy
import functools
import heapq
from bisect import bisect_right
from collections.abc import Iterator
from datetime import datetime, time, timedelta, timezone, tzinfo
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

from ..exceptions import InvalidSchedule

UTC = timezone.utc
_ONE_SECOND = timedelta(seconds=1)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

MACROS: dict[str, str] = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}


def aware_utc(value: object, name: str) -> datetime:
    """``value`` as an aware UTC datetime truncated to the second, else InvalidSchedule.

    Fires are whole seconds, so "after ``value``" and "after its second" are the same.
    """
    if type(value) is datetime and value.tzinfo is UTC:
        # Already one (the common case: every time the store reads), or a clock's now.
        return value.replace(microsecond=0) if value.microsecond else value
    if not isinstance(value, datetime) or value.utcoffset() is None:
        raise InvalidSchedule(
            f"{name} must be a timezone-aware datetime, got {value!r}", field=name
        )
    try:
        return value.astimezone(UTC).replace(microsecond=0)
    except OverflowError as exc:
        raise InvalidSchedule(f"{name} {value!r} is out of range in UTC", field=name) from exc


def load_zone(tz: object) -> ZoneInfo:
    """Return the IANA zone named ``tz`` or raise :class:`InvalidSchedule` naming ``tz``."""
    if not isinstance(tz, str) or not tz.strip():
        raise InvalidSchedule(f"tz must be an IANA zone name such as 'UTC', got {tz!r}", field="tz")
    try:
        return ZoneInfo(tz)
    except (ZoneInfoNotFoundError, ValueError, OSError) as exc:
        # ZoneInfo raises ValueError for keys that are not relative paths and OSError
        # (IsADirectoryError) for a zone directory such as "America".
        raise InvalidSchedule(f"tz {tz!r} is not a known IANA zone", field="tz") from exc


def expand_expr(expr: object) -> str:
    """Return ``expr`` as five space-separated cron fields (macros expanded).

    Raises :class:`InvalidSchedule` naming ``expr`` for anything that is not a string of
    five whitespace-separated fields or a known macro.
    """
    if not isinstance(expr, str):
        raise InvalidSchedule(f"expr must be a string, got {type(expr).__name__}", field="expr")
    text = expr.strip()
    # cronsim upper-cases before matching names, and some non-ASCII letters upper-case
    # to ASCII (U+017F LONG S gives "SUN" from "\u017fun"): accept ASCII only, so that
    # what is stored is what is matched.
    if not text.isascii():
        raise InvalidSchedule(f"expr {expr!r} must be ASCII", field="expr")
    if text.startswith("@"):
        expanded = MACROS.get(text.lower())
        if expanded is None:
            known = " ".join(MACROS)
            raise InvalidSchedule(f"expr {expr!r} is not a known macro ({known})", field="expr")
        return expanded
    fields = text.split()
    if len(fields) != 5:
        # cronsim would also take a sixth (seconds) field; the contract is five.
        raise InvalidSchedule(
            f"expr {expr!r} must have five fields (minute hour day-of-month month "
            f"day-of-week), got {len(fields)}",
            field="expr",
        )
    return " ".join(fields)


_MONTHS = ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC")
_WEEKDAYS = ("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT")
# Names each field accepts (minute, hour, day-of-month, month, day-of-week).
_NAMES: tuple[dict[str, int], ...] = (
    {},
    {},
    {},
    {name: number for number, name in enumerate(_MONTHS, 1)},
    {name: number for number, name in enumerate(_WEEKDAYS)},
)


def _one_value(first: str, last: str, names: dict[str, int]) -> bool:
    """Whether the range ``first-last`` holds a single value (``2-2``, ``mon-1``)."""

    def value(text: str) -> int | None:
        if text.isdigit():
            return int(text)
        return names.get(text.upper())

    start = value(first)
    return start is not None and start == value(last)


def for_cronsim(fields: str) -> str:
    """``fields`` rewritten where cronsim reads them differently from cron.

    cronsim reads a stepped range holding one value (``2-2/5``) as ``2/5``, i.e.
    ``2-max/5``; in cron it is just ``2``. Such parts become the single value (only with
    a valid step, so that ``2-2/0`` is still refused).
    """
    rewritten = []
    for field, names in zip(fields.split(), _NAMES, strict=True):
        parts = []
        for part in field.split(","):
            base, slash, step = part.partition("/")
            first, dash, last = base.partition("-")
            valid_step = step.isdigit() and int(step) > 0
            if slash and dash and valid_step and _one_value(first, last, names):
                part = first
            parts.append(part)
        rewritten.append(",".join(parts))
    return " ".join(rewritten)


def is_fixed_time(fields: str) -> bool:
    """Whether five expanded fields are fixed-time: neither minute nor hour starts with ``*``."""
    minute, hour = fields.split()[:2]
    return not minute.startswith("*") and not hour.startswith("*")


@functools.lru_cache(maxsize=4096)
def _parsed(fields: str) -> tuple[CronSim, tuple[int, ...]]:
    """cronsim's parse of ``fields`` and its hours (a bad expression is not cached)."""
    try:
        template = CronSim(for_cronsim(fields), datetime(2000, 1, 1))
    except CronSimError as exc:
        raise InvalidSchedule(f"expr {fields!r} is invalid: {exc}", field="expr") from exc
    return template, tuple(sorted(template.hours))


class ZonedCron:
    """Fires of one five-field expression in one zone (the engine behind ``Cron``).

    Safe to share between threads: queries work on a copy of the parsed expression, and
    the only state written is a one-entry cache replaced in a single assignment.
    """

    __slots__ = ("_fixed_time", "_hours", "_last_gap", "_template", "_zone")

    def __init__(self, fields: str, zone: tzinfo, fixed_time: bool) -> None:
        # Parsed once per expression; every query copies the template instead of
        # re-parsing, so engines of the same expression share it.
        self._template, self._hours = _parsed(fields)
        self._zone = zone
        self._fixed_time = fixed_time
        # The most recent gap end found, as (before, end): a gap holds many matching
        # minutes (a whole day in Pacific/Apia 2011) and each would bisect again.
        self._last_gap: tuple[datetime, datetime] | None = None

    def fires_after(self, after: datetime) -> Iterator[datetime]:
        """Yield every fire strictly after ``after`` (aware UTC, whole second), ascending.

        Stops when cronsim finds no match within 50 years or reaches year 9999.
        """
        try:
            start = self._scan_start(after)
        except OverflowError:  # within a day of year 1 or 9999
            return
        # A shallow copy shares the parsed (never mutated) field sets; it starts at start.
        sim = copy.copy(self._template)
        sim.dt = start
        pending: list[datetime] = []
        last = after
        while True:
            try:
                match = next(sim)
                instants, lowest = self._instants(match)
            except (StopIteration, OverflowError):
                # No match within 50 years (cronsim's horizon), or the end of datetime.
                break
            for instant in instants:
                if instant > last:
                    heapq.heappush(pending, instant)
            # No later match maps to an instant before ``lowest``, so everything pending
            # up to it is final. Fires usually come out here, one match at a time.
            while pending and pending[0] <= lowest:
                fire = heapq.heappop(pending)
                if fire > last:  # coalesced gap fires arrive more than once
                    last = fire
                    yield fire
        while pending:
            fire = heapq.heappop(pending)
            if fire > last:
                last = fire
                yield fire

    def matched_wall(self, fire: datetime) -> datetime:
        """The naive wall time whose match gave the fire ``fire`` (a fire of this engine):
        its own wall time, or, for the fire at the end of a spring-forward gap, the first
        matching wall time inside the gap (the one the coalesced fire stands for)."""
        local = fire.astimezone(self._zone)
        wall = local.replace(tzinfo=None, fold=0)
        before = (fire - _ONE_SECOND).astimezone(self._zone)
        if self._fixed_time and before.utcoffset() != local.utcoffset():
            gap_start = before.replace(tzinfo=None, fold=0) + _ONE_SECOND
            if gap_start < wall:  # a spring-forward gap ends at ``fire``
                sim = copy.copy(self._template)
                sim.dt = gap_start - _ONE_SECOND
                try:
                    match = next(sim)
                except StopIteration:  # pragma: no cover - ``fire`` is a fire
                    return wall
                if match < wall:
                    return match
        return wall

    def fire_at_wall(self, wall: datetime) -> datetime | None:
        """The fire this engine's rules give a match at the naive wall time ``wall`` (the
        first, when the wall time happens twice; None: a wildcard match in a gap)."""
        instants, _lowest = self._instants(wall)
        return instants[0] if instants else None

    def _scan_start(self, after: datetime) -> datetime:
        """The naive wall time from which cronsim must look for fires after ``after``."""
        local = after.astimezone(self._zone)
        wall = local.replace(tzinfo=None)
        if local.fold == 0:
            here = self._utcoffset(wall, 0)
            repeat = self._utcoffset(wall, 1)
            if repeat < here:
                # ``after`` is in the first pass of a repeated hour: the second pass
                # starts earlier on the wall clock and its fires are all after ``after``.
                wall -= here - repeat
        if wall.hour not in self._template.hours:
            # cronsim would step through the unmatched hours one by one (most of its
            # time for a daily schedule); no match lies before the next matching hour.
            later = bisect_right(self._hours, wall.hour)
            if later < len(self._hours):
                wall = datetime.combine(wall.date(), time(self._hours[later]))
            else:
                wall = datetime.combine(wall.date() + timedelta(days=1), time(self._hours[0]))
        # cronsim steps one second before matching: start one second early so that a
        # match exactly at ``wall`` is seen.
        return wall - _ONE_SECOND

    def _utcoffset(self, wall: datetime, fold: int) -> timedelta:
        offset = wall.replace(tzinfo=self._zone, fold=fold).utcoffset()
        assert offset is not None  # a ZoneInfo always has an offset
        return offset

    def _instants(self, wall: datetime) -> tuple[tuple[datetime, ...], datetime]:
        """Fires of one matching wall time, and a lower bound of every later match's fires."""
        first_offset = self._utcoffset(wall, 0)
        second_offset = self._utcoffset(wall, 1)
        first = (wall - first_offset).replace(tzinfo=UTC)
        if first_offset == second_offset:
            return (first,), first
        second = (wall - second_offset).replace(tzinfo=UTC)
        if first_offset > second_offset:
            # Fall back: the wall time happens at ``first`` and again at ``second``.
            return ((first,) if self._fixed_time else (first, second)), first
        # Spring forward: the wall time does not exist. ``second`` is before the
        # transition, ``first`` after it, and every later match maps to the gap's end.
        if not self._fixed_time:
            return (), second
        end = self._gap_end(second, first)
        return (end,), end

    def _gap_end(self, before: datetime, after: datetime) -> datetime:
        """The transition instant in ``(before, after]``, to the second."""
        cached = self._last_gap
        if cached is not None and before < cached[1] <= after:
            return cached[1]
        zone = self._zone
        target = after.astimezone(zone).utcoffset()
        low = (before - _EPOCH) // _ONE_SECOND
        high = (after - _EPOCH) // _ONE_SECOND
        # Bisect on whole seconds: offsets change at whole seconds, and some gaps end
        # off the minute (Africa/Monrovia 1972 ended at 00:44:30 UTC).
        while high - low > 1:
            middle = (low + high) // 2
            if (_EPOCH + middle * _ONE_SECOND).astimezone(zone).utcoffset() == target:
                high = middle
            else:
                low = middle
        end = _EPOCH + high * _ONE_SECOND
        self._last_gap = (before, end)
        return end
