"""A zone's clock changes (UTC offset changes), found with zoneinfo, and how to word them.

Pure: no I/O. ``zoneinfo`` does not list a zone's transitions, so they are found by
sampling the UTC offset every few hours and bisecting each change to the second (offsets
change at whole seconds; Africa/Monrovia's 1972 change ended at 00:44:30 UTC).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import date, datetime, timedelta, timezone, tzinfo

from ..exceptions import InvalidInput
from .cron_engine import load_zone

__all__ = ["ClockChange", "clock_changes", "offset_text", "parse_day", "parse_start"]

UTC = timezone.utc
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
ONE_SECOND = timedelta(seconds=1)
# The sampling step. tzdata has no two changes this close that return to the same offset.
_SAMPLE_STEP = timedelta(hours=3)


@dataclass(frozen=True, slots=True)
class ClockChange:
    """One UTC offset change: from ``at`` (the first second of the new offset) the zone
    is ``after`` from UTC instead of ``before``."""

    at: datetime
    before: timedelta
    after: timedelta
    before_abbreviation: str
    after_abbreviation: str

    @property
    def kind(self) -> str:
        """``gap`` (clocks go forward: wall times skipped) or ``fold`` (repeated)."""
        return "gap" if self.after > self.before else "fold"

    @property
    def wall_from(self) -> datetime:
        """The first wall time (naive) skipped or repeated."""
        return self.at.replace(tzinfo=None) + min(self.before, self.after)

    @property
    def wall_to(self) -> datetime:
        """The wall time (naive) just after the skipped or repeated stretch."""
        return self.at.replace(tzinfo=None) + max(self.before, self.after)

    def touches(self, day: date) -> bool:
        """Whether the skipped or repeated stretch lies (partly) on the local date ``day``."""
        return self.wall_from.date() <= day <= self.wall_to.date()

    def clocks(self) -> str:
        """``2027-03-28: clocks go forward 1 h, from 01:00 GMT to 02:00 BST``."""
        naive = self.at.replace(tzinfo=None)
        old = wall_clock(naive + self.before, self.before_abbreviation, self.before)
        new = wall_clock(naive + self.after, self.after_abbreviation, self.after)
        way = "forward" if self.kind == "gap" else "back"
        size = _duration(abs(self.after - self.before))
        return f"{self.wall_from.date().isoformat()}: clocks go {way} {size}, from {old} to {new}"

    def stretch(self) -> str:
        """``01:00-01:59``: the wall times skipped or repeated (to the second if need be)."""
        step = timedelta(minutes=1) if self.wall_to.second == 0 else ONE_SECOND
        return f"{clock(self.wall_from)}-{clock(self.wall_to - step)}"


def clock_changes(zone: tzinfo, start: datetime, end: datetime) -> Iterator[ClockChange]:
    """Every offset change of ``zone`` with ``start < at <= end`` (aware datetimes)."""
    low = start
    low_offset = offset_at(zone, low)
    while low < end:
        high = min(low + _SAMPLE_STEP, end)
        if offset_at(zone, high) == low_offset:
            low = high
            continue
        below = (low - EPOCH) // ONE_SECOND
        above = (high - EPOCH) // ONE_SECOND
        while above - below > 1:
            middle = (below + above) // 2
            if offset_at(zone, EPOCH + middle * ONE_SECOND) == low_offset:
                below = middle
            else:
                above = middle
        at = EPOCH + above * ONE_SECOND
        after = offset_at(zone, at)
        yield ClockChange(
            at=at,
            before=low_offset,
            after=after,
            before_abbreviation=(at - ONE_SECOND).astimezone(zone).tzname() or "",
            after_abbreviation=at.astimezone(zone).tzname() or "",
        )
        low, low_offset = at, after


def offset_at(zone: tzinfo, instant: datetime) -> timedelta:
    offset = instant.astimezone(zone).utcoffset()
    assert offset is not None  # a ZoneInfo always has one
    return offset


def parse_day(text: str) -> date:
    """``--around``: a date ``YYYY-MM-DD``; anything else raises InvalidInput naming it."""
    try:
        day = date.fromisoformat(text.strip())
    except ValueError:
        day = None
    # A day near either end of datetime's range has no whole neighbourhood to look at (the
    # listing may reach weeks or months around it).
    if day is None or not date(2, 1, 1) <= day <= date(9998, 12, 31):
        raise InvalidInput(
            f"around: {text!r} is not a date YYYY-MM-DD from 0002-01-01 to 9998-12-31",
            field="around",
        )
    return day


def parse_start(text: str, zone: str) -> datetime:
    """``--from``: an ISO 8601 date or datetime; without an offset it is wall time in
    ``zone``; a wall time the clocks skip starts at the gap's beginning, so that the
    fire at the gap's end is listed. Anything else raises InvalidInput naming ``from``."""
    tz = load_zone(zone)
    value = text.strip()
    if value.endswith(("Z", "z")):
        value = value[:-1] + "+00:00"
    try:
        parsed = datetime.fromisoformat(value)
        if parsed.utcoffset() is not None:
            return parsed.astimezone(UTC)
        # fold=0 and fold=1 name the same wall time's two instants in a fold, and the two
        # sides of a gap in a gap: the earlier one is never after the time meant.
        return min(parsed.replace(tzinfo=tz, fold=fold).astimezone(UTC) for fold in (0, 1))
    except (ValueError, OverflowError) as exc:
        raise InvalidInput(
            f"from: {text!r} is not an ISO 8601 datetime such as 2027-03-28T00:30",
            field="from",
        ) from exc


def utc_text(instant: datetime) -> str:
    """``2027-03-28T01:00:00Z``."""
    return instant.astimezone(UTC).isoformat().replace("+00:00", "Z")


def offset_text(offset: timedelta) -> str:
    """``+01:00``, ``-03:30``, ``+00:01:15`` (seconds only when there are some)."""
    sign = "-" if offset < timedelta(0) else "+"
    seconds = int(abs(offset).total_seconds())
    hours, rest = divmod(seconds, 3600)
    minutes, seconds = divmod(rest, 60)
    text = f"{sign}{hours:02d}:{minutes:02d}"
    return f"{text}:{seconds:02d}" if seconds else text


def clock(wall: datetime) -> str:
    """``01:30`` (``00:44:30`` when there are seconds)."""
    return wall.strftime("%H:%M:%S" if wall.second else "%H:%M")


def wall_clock(wall: datetime, abbreviation: str, offset: timedelta) -> str:
    """``01:30 BST``."""
    return f"{clock(wall)} {abbreviation or offset_text(offset)}"


def local_clock(instant: datetime, offset: timedelta, abbreviation: str) -> str:
    """The wall clock of ``instant`` at ``offset``, then the same in UTC: ``01:30 BST (00:30Z)``."""
    wall = (instant + offset).replace(tzinfo=None)
    return f"{wall_clock(wall, abbreviation, offset)} ({clock(instant.replace(tzinfo=None))}Z)"


def _duration(span: timedelta) -> str:
    minutes, seconds = divmod(int(span.total_seconds()), 60)
    hours, minutes = divmod(minutes, 60)
    parts = [f"{hours} h" if hours else "", f"{minutes} min" if minutes else ""]
    parts.append(f"{seconds} s" if seconds else "")
    return " ".join(part for part in parts if part)
