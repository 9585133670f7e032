"""A brute-force oracle for cron fires across DST, written from the rules, not from cronsim.

It knows nothing of cronsim or of ``celery_gaffer``: a small field matcher for the
expressions the property test generates, a scan of the zone's UTC offsets (found with
``astimezone`` only), and the table of DESIGN.md applied minute by minute:

* every local wall-clock minute in the window that matches the expression is mapped to the
  UTC instants whose local time it is (the offsets in force, checked one by one);
* one instant: it fires there; two (fall back): fixed-time fires at the first only,
  wildcard at both; none (spring forward): fixed-time fires at the instant the gap ends
  (all of a gap's matches coalesce into that fire), wildcard does not fire.

Slow on purpose where that makes it obvious; fast enough for thousands of two-day windows.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime, time, timedelta, timezone
from itertools import pairwise
from zoneinfo import ZoneInfo

UTC = timezone.utc
ONE_MINUTE = timedelta(minutes=1)

MACROS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
MONTHS = ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC")
MONTH_NAMES = {name: number for number, name in enumerate(MONTHS, 1)}
DAY_NAMES = {"SUN": 0, "MON": 1, "TUE": 2, "WED": 3, "THU": 4, "FRI": 5, "SAT": 6}


def _value(text: str, names: dict[str, int]) -> int:
    upper = text.upper()
    return names[upper] if upper in names else int(text)


def parse_field(text: str, low: int, high: int, names: dict[str, int]) -> frozenset[int]:
    """The values a cron field selects: ``*``, ``a``, ``a-b``, any of those ``/step``, lists.

    ``a/step`` means ``a-high/step`` (cronsim's and cronie's reading).
    """
    values: set[int] = set()
    for part in text.split(","):
        stepped = "/" in part
        base, _, step_text = part.partition("/")
        step = int(step_text) if stepped else 1
        if base == "*":
            first, last = low, high
        elif "-" in base:
            first_text, last_text = base.split("-")
            first, last = _value(first_text, names), _value(last_text, names)
        else:
            first = _value(base, names)
            last = high if stepped else first
        values.update(range(first, last + 1, step))
    return frozenset(values)


@dataclass(frozen=True)
class Expression:
    """A parsed five-field expression (no L/W/#: the generator does not make them)."""

    minutes: frozenset[int]
    hours: frozenset[int]
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]  # 0 = Sunday; 7 already folded into 0
    days_or: bool  # both day fields restricted: a day matches if either matches
    fixed_time: bool  # neither minute nor hour starts with "*"

    @classmethod
    def parse(cls, expr: str) -> Expression:
        fields = MACROS.get(expr.strip().lower(), expr).split()
        minute, hour, day, month, weekday = fields
        return cls(
            minutes=parse_field(minute, 0, 59, {}),
            hours=parse_field(hour, 0, 23, {}),
            days=parse_field(day, 1, 31, {}),
            months=parse_field(month, 1, 12, MONTH_NAMES),
            weekdays=frozenset(v % 7 for v in parse_field(weekday, 0, 7, DAY_NAMES)),
            days_or=not day.startswith("*") and not weekday.startswith("*"),
            fixed_time=not minute.startswith("*") and not hour.startswith("*"),
        )

    def never_matches(self) -> bool:
        """Whether no month of the year has any of the days (AND rule only), e.g. Feb 30."""
        longest = {1: 31, 2: 29, 3: 31, 4: 30, 5: 31, 6: 30, 7: 31, 8: 31, 9: 30, 10: 31}
        longest |= {11: 30, 12: 31}
        return not self.days_or and min(self.days) > max(longest[m] for m in self.months)

    def matches_day(self, day: date) -> bool:
        if day.month not in self.months:
            return False
        in_days = day.day in self.days
        in_weekdays = (day.weekday() + 1) % 7 in self.weekdays
        return in_days or in_weekdays if self.days_or else in_days and in_weekdays

    def wall_times(self, first: datetime, last: datetime) -> list[datetime]:
        """Every naive wall-clock minute in ``[first, last]`` that matches, ascending."""
        found = []
        day = first.date()
        while day <= last.date():
            if self.matches_day(day):
                for hour in sorted(self.hours):
                    for minute in sorted(self.minutes):
                        wall = datetime.combine(day, time(hour, minute))
                        if first <= wall <= last:
                            found.append(wall)
            day += timedelta(days=1)
        return found


@dataclass(frozen=True)
class Segment:
    """A stretch of UTC time ``[start, end)`` during which the zone's offset is ``offset``."""

    start: datetime
    end: datetime
    offset: timedelta


def offset_at(zone: ZoneInfo, instant: datetime) -> timedelta:
    offset = instant.astimezone(zone).utcoffset()
    assert offset is not None
    return offset


def find_transitions(
    zone: ZoneInfo, start: datetime, end: datetime, step: timedelta
) -> list[datetime]:
    """UTC instants (to the second) in ``(start, end]`` where the offset changes.

    Sampled every ``step``: two changes closer together than ``step`` can be missed.
    """
    found = []
    # Whole seconds throughout: transitions happen on whole seconds, and the bisection
    # below must not round ``middle`` back below ``low``.
    start, end = start.replace(microsecond=0), end.replace(microsecond=0)
    here, offset = start, offset_at(zone, start)
    while here < end:
        there = min(here + step, end)
        offset_there = offset_at(zone, there)
        if offset_there != offset:
            low, high = here, there  # offset(low) == offset, offset(high) != offset
            while high - low > timedelta(seconds=1):
                middle = low + (high - low) // 2 // timedelta(seconds=1) * timedelta(seconds=1)
                if offset_at(zone, middle) == offset:
                    low = middle
                else:
                    high = middle
            found.append(high)
        here, offset = there, offset_there
    return found


def segments(zone: ZoneInfo, start: datetime, end: datetime) -> list[Segment]:
    """The constant-offset stretches covering ``[start, end)`` (bounds whole seconds)."""
    start, end = start.replace(microsecond=0), end.replace(microsecond=0)
    cuts = [start, *find_transitions(zone, start, end, timedelta(minutes=10)), end]
    return [Segment(a, b, offset_at(zone, a)) for a, b in pairwise(cuts) if a < b]


def expected_fires(
    expr: str, zone_name: str, start: datetime, end: datetime, seen: set[str] | None = None
) -> list[datetime]:
    """Every fire ``f`` of ``expr`` in ``zone_name`` with ``start < f <= end`` (aware UTC).

    ``seen``, when given, collects which rules were applied: "gap", "repeat".
    """
    seen = set() if seen is None else seen
    expression = Expression.parse(expr)
    zone = ZoneInfo(zone_name)
    start = start.astimezone(UTC)
    end = end.astimezone(UTC)
    # Generous margins: offsets differ by at most a day across any window we test.
    stretches = segments(zone, start - timedelta(days=2), end + timedelta(days=2))
    offsets = [s.offset for s in stretches]
    first_wall = (start + min(offsets)).replace(tzinfo=None) - ONE_MINUTE
    last_wall = (end + max(offsets)).replace(tzinfo=None) + ONE_MINUTE
    fires: set[datetime] = set()
    for wall in expression.wall_times(first_wall, last_wall):
        occurrences = []
        for stretch in stretches:
            instant = (wall - stretch.offset).replace(tzinfo=UTC)
            if stretch.start <= instant < stretch.end:
                occurrences.append(instant)
        occurrences.sort()
        if len(occurrences) == 1:
            fires.add(occurrences[0])
        elif occurrences:  # happens twice (or more)
            fires.update(occurrences[:1] if expression.fixed_time else occurrences)
            seen.add("repeat")
        elif expression.fixed_time:  # does not exist: find the gap that swallowed it
            fires.add(_gap_end(stretches, wall))
            seen.add("gap")
        else:
            seen.add("gap")
    return sorted(f for f in fires if start < f <= end)


def _gap_end(stretches: list[Segment], wall: datetime) -> datetime:
    for before, after in pairwise(stretches):
        gap_start = (before.end + before.offset).replace(tzinfo=None)
        gap_end = (after.start + after.offset).replace(tzinfo=None)
        if gap_start <= wall < gap_end:
            return after.start
    raise AssertionError(f"{wall} exists nowhere yet is in no gap")
