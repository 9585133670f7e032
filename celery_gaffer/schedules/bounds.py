"""A schedule's bounds: ``start_at``, ``end_at`` and ``max_runs`` (pure: no I/O).

:class:`Bounds` is part of a schedule's ``gaffer`` options. Beat never asks a bounded
schedule for its fires directly: it asks the :class:`Window` that :meth:`Bounds.window`
makes of it, which answers the same questions (``next_after``, ``fires_between``,
``last_at_or_before``, ``count_between``) with every fire outside the bounds left out.
A schedule whose ``max_runs`` fires have been sent ends at its watermark, so a tick, a
health check and an edit all see that it has nothing left to fire.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from ..exceptions import InvalidInput
from .calendars import CalendarRule, CalendarView, Fate
from .cron_engine import aware_utc
from .kinds import UTC, At, Every, Schedule

_ONE_MICROSECOND = timedelta(microseconds=1)
#: Most ``max_runs`` (the counter is a 32-bit column).
MAX_RUNS_LIMIT = 2**31 - 1
BOUND_KEYS = ("start_at", "end_at", "max_runs")


@dataclass(frozen=True, slots=True)
class Bounds:
    """``start_at`` / ``end_at``: no fire before / after them (both inclusive; aware UTC);
    ``max_runs``: the schedule is done once it has sent that many fires."""

    start_at: datetime | None = None
    end_at: datetime | None = None
    max_runs: int | None = None
    #: The ``skip_on`` calendars and ``on_skip`` (:mod:`.calendars`), if any: the window
    #: applies them too.
    calendar: CalendarRule | None = None

    @property
    def skip_on(self) -> tuple[str, ...] | None:
        """The ``skip_on`` calendars (None: none)."""
        return None if self.calendar is None else self.calendar.skip_on

    @property
    def on_skip(self) -> str:
        """What a fire on a ``skip_on`` date does: ``skip``, ``next_day``, ``previous_day``."""
        return "skip" if self.calendar is None else self.calendar.on_skip

    @property
    def bounded(self) -> bool:
        return (self.start_at, self.end_at, self.max_runs) != (None, None, None)

    def runs_left(self, fired: int) -> int | None:
        """How many more fires may be sent (None: no limit)."""
        return None if self.max_runs is None else max(self.max_runs - fired, 0)

    def window(self, schedule: Schedule, *, fired: int, watermark: datetime) -> Schedule | Window:
        """``schedule`` with the fires outside the bounds left out (``schedule`` itself when
        unbounded). ``fired``: the fires it has sent; ``watermark``: its latest decided
        fire time (when no run is left, the window ends there)."""
        end = self.end_at
        if self.runs_left(fired) == 0:
            end = watermark if end is None else min(end, watermark)
        if self.calendar is not None:
            return Window(CalendarView(schedule, self.calendar), self.start_at, end)
        if self.start_at is None and end is None:
            return schedule
        return Window(schedule, self.start_at, end)

    def finished(self, schedule: Schedule, *, fired: int, watermark: datetime) -> bool:
        """True when a one-off or bounded schedule has no fire left after ``watermark``."""
        if not self.bounded and not isinstance(schedule, At):
            return False
        return self.window(schedule, fired=fired, watermark=watermark).next_after(watermark) is None


class Window:
    """A schedule seen through ``[start_at, end_at]``: the same questions, answered only
    with the fires inside (see :class:`Bounds`)."""

    def __init__(
        self,
        schedule: Schedule | CalendarView,
        start_at: datetime | None,
        end_at: datetime | None,
    ) -> None:
        self.schedule = schedule
        # Fires are whole seconds and "after t" truncates t to its second: "after" the
        # instant just before start_at is "at or after start_at".
        self._after = None if start_at is None else start_at - _ONE_MICROSECOND
        self._until = end_at

    @property
    def jitter(self) -> float:
        return self.schedule.jitter

    @property
    def counts_exactly(self) -> bool:
        """Whether ``count_between`` is arithmetic (an every schedule), not a walk."""
        return isinstance(self.schedule, Every)

    def _clip(self, start: datetime, end: datetime) -> tuple[datetime, datetime]:
        after, until = aware_utc(start, "start"), end
        if self._after is not None and after < self._after:
            after = self._after
        if self._until is not None and until > self._until:
            until = self._until
        return after, until

    def next_after(self, t: datetime) -> datetime | None:
        after = aware_utc(t, "t")
        if self._after is not None and after < self._after:
            after = self._after
        fire = self.schedule.next_after(after)
        if fire is None or (self._until is not None and fire > self._until):
            return None
        return fire

    def last_at_or_before(self, t: datetime) -> datetime | None:
        until = aware_utc(t, "t")
        if self._until is not None and until > self._until:
            until = self._until
        fire = self.schedule.last_at_or_before(until)
        if fire is None or (self._after is not None and fire <= self._after):
            return None
        return fire

    def fires_between(self, start: datetime, end: datetime) -> Iterator[datetime]:
        after, until = self._clip(start, aware_utc(end, "end"))
        if until <= after:
            return iter(())
        return self.schedule.fires_between(after, until)

    def count_between(self, start: datetime, end: datetime, limit: int) -> int:
        after, until = self._clip(start, aware_utc(end, "end"))
        if until <= after:
            return 0
        return self.schedule.count_between(after, until, limit)

    def send_at(self, key: str, nominal: datetime) -> datetime:
        return self.schedule.send_at(key, nominal)

    @property
    def calendar(self) -> CalendarView | None:
        """The calendar view it sees the schedule through, if any."""
        return self.schedule if isinstance(self.schedule, CalendarView) else None

    def fates_between(self, start: datetime, end: datetime) -> list[Fate]:
        """The plain schedule's fires in ``(start, end]`` and inside the bounds that its
        calendar skips or moves (:meth:`.CalendarView.fates_between`)."""
        view = self.calendar
        if view is None:
            return []
        after, until = self._clip(start, aware_utc(end, "end"))
        if until <= after:
            return []
        return view.fates_between(after, until)


def _instant(value: Any, field_name: str) -> datetime | None:
    if value is None:
        return None
    if isinstance(value, str):
        text = value[:-1] + "+00:00" if value.endswith(("Z", "z")) else value
        try:
            value = datetime.fromisoformat(text)
        except ValueError:
            raise InvalidInput(
                f"{field_name}: not an ISO 8601 datetime: {value!r}", field=field_name
            ) from None
    if not isinstance(value, datetime) or value.utcoffset() is None:
        raise InvalidInput(
            f"{field_name}: expected a timezone-aware datetime (or ISO 8601 text with an "
            f"offset), got {value!r}",
            field=field_name,
        )
    try:
        return value.astimezone(UTC)
    except OverflowError:
        raise InvalidInput(f"{field_name}: out of range: {value!r}", field=field_name) from None


def validate_bounds(gaffer: Mapping[str, Any]) -> Bounds:
    """The ``start_at`` / ``end_at`` / ``max_runs`` of ``gaffer`` options, checked."""
    start_at = _instant(gaffer.get("start_at"), "gaffer.start_at")
    end_at = _instant(gaffer.get("end_at"), "gaffer.end_at")
    if start_at is not None and end_at is not None and end_at < start_at:
        raise InvalidInput(
            f"gaffer.end_at: {end_at.isoformat()} is before start_at {start_at.isoformat()}",
            field="gaffer.end_at",
        )
    max_runs = gaffer.get("max_runs")
    if max_runs is not None and (
        isinstance(max_runs, bool)
        or not isinstance(max_runs, int)
        or not 1 <= max_runs <= MAX_RUNS_LIMIT
    ):
        raise InvalidInput(
            f"gaffer.max_runs: expected a whole number from 1 to {MAX_RUNS_LIMIT}, "
            f"got {max_runs!r}",
            field="gaffer.max_runs",
        )
    return Bounds(start_at, end_at, max_runs)


__all__ = ["BOUND_KEYS", "MAX_RUNS_LIMIT", "Bounds", "Window", "validate_bounds"]
