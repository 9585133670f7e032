"""Business calendars: fires on listed dates skipped or moved (pure: no I/O).

A schedule's ``gaffer={"skip_on": [...], "on_skip": ...}`` names calendars of dates:

* ``weekends``: Saturdays and Sundays;
* ``holidays:GB``, ``holidays:US-CA``: a country's (and subdivision's) public holidays,
  with their observed days, from the ``holidays`` package (the ``holidays`` extra);
* any other name: a calendar stored in the database (``celery gaffer calendars add``),
  whose dates the caller loads and passes in (:meth:`CalendarRule.with_stored`).

A fire whose local date, in the schedule's zone (UTC for ``every``), is in one of them is
dropped (``skip``) or moved (``next_day`` / ``previous_day``) to the nearest date in that
direction that is in none of them, at the same local time: the moved fire is the one the
schedule's own rules give for that wall time on that date (a one-day cron evaluated in
its zone, so a DST change is crossed as every cron fire crosses it). A moved fire's
nominal time is that new instant: when the schedule fires then anyway, the two are one
fire. :class:`CalendarView` answers a schedule's questions (``next_after``,
``fires_between``...) with the calendar applied.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import date, datetime, time, timedelta
from typing import Any

from ..exceptions import InvalidInput
from .cron_engine import aware_utc, load_zone
from .kinds import UTC, At, Cron, Schedule

#: What happens to a fire on a calendar date.
ON_SKIP = ("skip", "next_day", "previous_day")
#: A stored calendar's name: lower-case letters, digits, ``.``, ``_`` and ``-``.
CALENDAR_NAME = re.compile(r"[a-z0-9][a-z0-9._-]{0,63}")
#: Farthest a fire is moved; a longer run of calendar dates skips it.
MAX_MOVE_DAYS = 31
WEEKENDS = "weekends"
HOLIDAYS_PREFIX = "holidays:"
_HOLIDAY_NAME = re.compile(r"holidays:([A-Z]{2,3})(?:-([A-Za-z0-9]{1,10}))?")
_ONE_DAY = timedelta(days=1)
_ONE_MICRO = timedelta(microseconds=1)
# Days walked past without a fire before giving up on a next / previous fire.
_MAX_WALK = 4_000
#: A walk that has passed at least this many of the schedule's fires (or busy days) over
#: more than :data:`NO_FIRE_SPAN` without one surviving the calendars gives up: the
#: schedule is refused (:class:`NoFireSurvives`) rather than searched for decades.
NO_FIRE_STEPS = 53
NO_FIRE_SPAN = timedelta(days=366)
# Days whose answers a view keeps.
_CACHE_DAYS = 64


class NoFireSurvives(InvalidInput):
    """No fire of a schedule survives its calendars (every one is skipped) in the walk's
    reach: :data:`NO_FIRE_STEPS` fires over more than :data:`NO_FIRE_SPAN`."""


def validate_calendar_name(name: Any, field_name: str = "name") -> str:
    """A stored calendar's name, checked (InvalidInput naming ``field_name``)."""
    if not isinstance(name, str) or not CALENDAR_NAME.fullmatch(name) or name == WEEKENDS:
        raise InvalidInput(
            f"{field_name}: {name!r} is not a calendar name (1-64 of a-z, 0-9, '.', '_', "
            "'-'; not 'weekends')",
            field=field_name,
        )
    return name


def _holidays_module() -> Any:
    try:
        import holidays
    except ImportError:  # pragma: no cover - the test extra installs it
        raise InvalidInput(
            "gaffer.skip_on: holidays:... calendars need the holidays package "
            "(pip install 'celery-gaffer[holidays]')",
            field="gaffer.skip_on",
        ) from None
    return holidays


@functools.lru_cache(maxsize=512)
def _holidays_of(country: str, subdiv: str | None, year: int) -> Mapping[date, str]:
    found = _holidays_module().country_holidays(country, subdiv=subdiv, years=year)
    return {day: str(label) for day, label in found.items()}


def _holiday_calendar(name: str) -> tuple[str, str | None]:
    """``holidays:GB`` -> ("GB", None), checked against the package."""
    match = _HOLIDAY_NAME.fullmatch(name)
    if match is None:
        raise InvalidInput(
            f"gaffer.skip_on: {name!r} is not holidays:<country>[-<subdivision>] "
            "(holidays:GB, holidays:US-CA)",
            field="gaffer.skip_on",
        )
    country, subdiv = match.group(1), match.group(2)
    try:
        _holidays_of(country, subdiv, 2026)
    except NotImplementedError as exc:
        raise InvalidInput(f"gaffer.skip_on: {name!r}: {exc}", field="gaffer.skip_on") from None
    return country, subdiv


@dataclass(frozen=True, slots=True)
class CalendarRule:
    """A schedule's ``skip_on`` calendars and ``on_skip``, and the dates of the stored
    calendars it names once loaded (``stored``: name -> dates; None: not loaded)."""

    skip_on: tuple[str, ...]
    on_skip: str = "skip"
    stored: tuple[tuple[str, frozenset[date]], ...] | None = field(default=None, compare=False)

    @property
    def stored_names(self) -> tuple[str, ...]:
        """The stored calendars it names (neither ``weekends`` nor ``holidays:``)."""
        return tuple(n for n in self.skip_on if n != WEEKENDS and not n.startswith(HOLIDAYS_PREFIX))

    def with_stored(self, calendars: Mapping[str, Iterable[date]]) -> CalendarRule:
        """This rule with its stored calendars' dates; InvalidInput (``gaffer.skip_on``)
        when one of them does not exist."""
        found = []
        for name in self.stored_names:
            if name not in calendars:
                raise InvalidInput(
                    f"gaffer.skip_on: no stored calendar named {name!r} "
                    "(celery gaffer calendars add)",
                    field="gaffer.skip_on",
                )
            found.append((name, frozenset(calendars[name])))
        return CalendarRule(self.skip_on, self.on_skip, tuple(found))

    def reason(self, day: date) -> tuple[str, str] | None:
        """``(calendar, what the day is)`` of the first calendar holding ``day``, else None.
        Stored calendars not loaded hold no date."""
        stored = dict(self.stored or ())
        for name in self.skip_on:
            if name == WEEKENDS:
                if day.weekday() >= 5:
                    return name, day.strftime("%A")
            elif name.startswith(HOLIDAYS_PREFIX):
                country, subdiv = _holiday_calendar(name)
                label = _holidays_of(country, subdiv, day.year).get(day)
                if label is not None:
                    return name, label
            elif day in stored.get(name, ()):
                return name, name
        return None


def validate_calendars(gaffer: Mapping[str, Any]) -> CalendarRule | None:
    """The ``skip_on`` / ``on_skip`` options, checked (None: no calendar)."""
    skip_on = gaffer.get("skip_on")
    on_skip = gaffer.get("on_skip")
    if on_skip is not None and on_skip not in ON_SKIP:
        raise InvalidInput(
            f"gaffer.on_skip: {on_skip!r} is not one of {', '.join(ON_SKIP)}",
            field="gaffer.on_skip",
        )
    if skip_on is None or skip_on == [] or skip_on == ():
        if on_skip is not None and on_skip != "skip":
            raise InvalidInput("gaffer.on_skip: needs skip_on calendars", field="gaffer.on_skip")
        return None
    if isinstance(skip_on, str) or not isinstance(skip_on, (list, tuple)):
        raise InvalidInput(
            f"gaffer.skip_on: expected a list of calendar names, got {skip_on!r}",
            field="gaffer.skip_on",
        )
    names: list[str] = []
    for name in skip_on:
        if isinstance(name, str) and name.startswith(HOLIDAYS_PREFIX):
            _holiday_calendar(name)
        elif name != WEEKENDS:
            validate_calendar_name(name, "gaffer.skip_on")
        if name not in names:
            names.append(name)
    return CalendarRule(tuple(names), on_skip or "skip")


def stored_rule(skip_on: Any, on_skip: Any) -> CalendarRule | None:
    """The rule of a row's ``skip_on`` (decoded JSON) and ``on_skip`` columns, as stored
    (not checked again: the store checked them before writing)."""
    if not skip_on or not isinstance(skip_on, list):
        return None
    return CalendarRule(tuple(str(name) for name in skip_on), str(on_skip or "skip"))


def rule_options(rule: CalendarRule | None) -> dict[str, Any]:
    """The ``skip_on`` / ``on_skip`` columns (or ``gaffer`` options) of ``rule``."""
    if rule is None:
        return {"skip_on": None, "on_skip": None}
    return {"skip_on": list(rule.skip_on), "on_skip": rule.on_skip}


def zone_name(schedule: Schedule) -> str:
    """The zone a schedule's local dates are read in (UTC for ``every``)."""
    return schedule.tz if isinstance(schedule, (Cron, At)) else "UTC"


@dataclass(frozen=True, slots=True)
class Fate:
    """What a calendar does to the fire ``nominal`` of the plain schedule: ``calendar``
    holds its date (as ``label``); ``moved_to`` is where it goes (None: skipped)."""

    nominal: datetime
    calendar: str
    label: str
    moved_to: datetime | None
    zone: str

    @property
    def text(self) -> str:
        """``2026-12-28: Boxing Day (observed), holidays:GB → moved to 2026-12-29``."""
        zone = load_zone(self.zone)
        day = self.nominal.astimezone(zone).date()
        head = f"{day.isoformat()}: {self.label}, {self.calendar}"
        if self.label == self.calendar:
            head = f"{day.isoformat()}: in {self.calendar}"
        if self.moved_to is None:
            return f"{head} → skipped"
        return f"{head} → moved to {self.moved_to.astimezone(zone).date().isoformat()}"


class CalendarView:
    """A schedule with a :class:`CalendarRule` applied: the same questions as a schedule,
    answered with its calendar dates' fires skipped or moved (see the module docstring)."""

    def __init__(self, schedule: Schedule, rule: CalendarRule) -> None:
        if isinstance(schedule, At):
            raise InvalidInput(
                "gaffer.skip_on: a one-off (at) schedule takes no calendar",
                field="gaffer.skip_on",
            )
        self.schedule = schedule
        self.rule = rule
        self._zone_name = zone_name(schedule)
        self._zone = load_zone(self._zone_name)
        # Per-day answers, kept while the view lives (a tick asks of the same days
        # many times: each catch-up fire's fate, each moved fire's source).
        self._days: dict[date, list[tuple[datetime, Fate | None]]] = {}
        self._reasons: dict[date, tuple[str, str] | None] = {}

    @property
    def jitter(self) -> float:
        return self.schedule.jitter

    def send_at(self, key: str, nominal: datetime) -> datetime:
        return self.schedule.send_at(key, nominal)

    # Days and fates.

    def _day(self, instant: datetime) -> date:
        return instant.astimezone(self._zone).date()

    def _reason(self, day: date) -> tuple[str, str] | None:
        if day not in self._reasons:
            if len(self._reasons) >= _CACHE_DAYS:
                self._reasons.clear()
            self._reasons[day] = self.rule.reason(day)
        return self._reasons[day]

    def _start(self, day: date) -> datetime:
        # Local midnight, a little early: the fires of ``day`` are filtered by their date.
        return datetime.combine(day, time(0), self._zone).astimezone(UTC) - timedelta(hours=3)

    def _plain_fires_on(self, day: date) -> list[datetime]:
        fires = self.schedule.fires_between(self._start(day), self._start(day + 2 * _ONE_DAY))
        return [f for f in fires if self._day(f) == day]

    def _same_time_on(self, fire: datetime, day: date) -> datetime | None:
        """The schedule's own fire for ``fire``'s intended wall time on ``day``: the wall
        time its rules matched (inside a spring-forward gap for a fire at the gap's end),
        mapped as the schedule maps it on that date (None: a wildcard cron's time in a gap)."""
        if not isinstance(self.schedule, Cron):  # every: UTC, no DST
            return fire + (day - self._day(fire))
        engine = self.schedule.engine
        wall = engine.matched_wall(fire)
        found = engine.fire_at_wall(datetime.combine(day, wall.time()))
        return found if found is not None and self._day(found) == day else None

    def fate(self, fire: datetime) -> Fate | None:
        """What the calendar does to the plain schedule's fire ``fire`` (None: nothing)."""
        day = self._day(fire)
        found = self._reason(day)
        if found is None:
            return None
        calendar, label = found
        moved = None
        if self.rule.on_skip != "skip":
            step = _ONE_DAY if self.rule.on_skip == "next_day" else -_ONE_DAY
            target = day + step
            for _ in range(MAX_MOVE_DAYS):
                if self._reason(target) is None:
                    moved = self._same_time_on(fire, target)
                    break
                target += step
        return Fate(fire, calendar, label, moved, self._zone_name)

    def _fires_on(self, day: date) -> list[tuple[datetime, Fate | None]]:
        """The fires on ``day`` with the calendar applied, ascending, each with the fate
        that moved it there (None: a plain fire)."""
        found = self._days.get(day)
        if found is None:
            if len(self._days) >= _CACHE_DAYS:
                self._days.clear()
            found = self._days[day] = self._compute_fires_on(day)
        return found

    def _compute_fires_on(self, day: date) -> list[tuple[datetime, Fate | None]]:
        if self._reason(day) is not None:
            return []
        found: dict[datetime, Fate | None] = {f: None for f in self._plain_fires_on(day)}
        if self.rule.on_skip != "skip":
            step = -_ONE_DAY if self.rule.on_skip == "next_day" else _ONE_DAY
            source = day + step
            for _ in range(MAX_MOVE_DAYS):
                if self._reason(source) is None:
                    break
                for fire in self._plain_fires_on(source):
                    fate = self.fate(fire)
                    if fate is not None and fate.moved_to is not None:
                        found.setdefault(fate.moved_to, fate)
                source += step
        return sorted(found.items())

    def moved_here(self, nominal: datetime) -> Fate | None:
        """The fate that moved a fire to ``nominal``, when it is a moved fire (and not a
        fire of the plain schedule too)."""
        if self.rule.on_skip == "skip":
            return None
        for fire, fate in self._fires_on(self._day(nominal)):
            if fire == nominal:
                return fate
        return None

    # A schedule's questions.

    def fires_between(self, start: datetime, end: datetime) -> Iterator[datetime]:
        after, until = aware_utc(start, "start"), aware_utc(end, "end")
        if self.rule.on_skip == "skip":  # the plain fires, those on calendar dates left out
            fires = self.schedule.fires_between(after, until)
            return (f for f in fires if self._reason(self._day(f)) is None)
        return self._walk(after, until)

    def _midnight(self, day: date) -> datetime:
        return datetime.combine(day, time(0), self._zone).astimezone(UTC)

    def _next_busy_day(self, day: date) -> date | None:
        """The first day after ``day`` that may hold a fire (a fire is moved at most
        :data:`MAX_MOVE_DAYS`); None: the plain schedule has no fire left."""
        reach = MAX_MOVE_DAYS * _ONE_DAY
        plain = self.schedule.next_after(self._start(day - reach))
        if plain is None:
            return None
        return max(day + _ONE_DAY, self._day(plain) - reach)

    def _previous_busy_day(self, day: date) -> date | None:
        reach = MAX_MOVE_DAYS * _ONE_DAY
        plain = self.schedule.last_at_or_before(self._start(day + reach + 2 * _ONE_DAY))
        if plain is None:
            return None
        return min(day - _ONE_DAY, self._day(plain) + reach)

    def _walk(self, after: datetime, until: datetime) -> Iterator[datetime]:
        day: date | None = self._day(after)
        last = self._day(until)
        while day is not None and day <= last:
            yield from (f for f, _ in self._fires_on(day) if after < f <= until)
            day = self._next_busy_day(day)

    def _give_up(self, step: int, start: date, reached: date) -> None:
        """Raise :class:`NoFireSurvives` once a walk from ``start`` has taken ``step``
        steps to ``reached`` past its reach (see :data:`NO_FIRE_STEPS`)."""
        if step >= NO_FIRE_STEPS and abs(reached - start) > NO_FIRE_SPAN:
            raise NoFireSurvives(
                f"gaffer.skip_on: no fire survives the calendars "
                f"({', '.join(self.rule.skip_on)}; on_skip {self.rule.on_skip}): the "
                f"{step} fires from {start.isoformat()} to {reached.isoformat()} fall on "
                "their dates",
                field="gaffer.skip_on",
            )

    def next_after(self, t: datetime) -> datetime | None:
        """The first fire after ``t`` (NoFireSurvives: none in the walk's reach)."""
        after = aware_utc(t, "t")
        start = self._day(after)
        if self.rule.on_skip == "skip":
            for step in range(_MAX_WALK):
                fire = self.schedule.next_after(after)
                if fire is None or self._reason(self._day(fire)) is None:
                    return fire
                self._give_up(step + 1, start, self._day(fire))
                after = max(fire, self._midnight(self._day(fire) + _ONE_DAY) - _ONE_MICRO)
            return None
        day: date | None = start
        for step in range(_MAX_WALK):
            if day is None:
                return None
            fires = [f for f, _ in self._fires_on(day) if f > after]
            if fires:
                return fires[0]
            self._give_up(step, start, day)
            day = self._next_busy_day(day)
        return None

    def last_at_or_before(self, t: datetime) -> datetime | None:
        """The last fire at or before ``t`` (NoFireSurvives: none in the walk's reach)."""
        until = aware_utc(t, "t")
        start = self._day(until)
        if self.rule.on_skip == "skip":
            for step in range(_MAX_WALK):
                fire = self.schedule.last_at_or_before(until)
                if fire is None or self._reason(self._day(fire)) is None:
                    return fire
                self._give_up(step + 1, start, self._day(fire))
                until = min(fire, self._midnight(self._day(fire))) - _ONE_MICRO
            return None
        day: date | None = start
        for step in range(_MAX_WALK):
            if day is None:
                return None
            fires = [f for f, _ in self._fires_on(day) if f <= until]
            if fires:
                return fires[-1]
            self._give_up(step, start, day)
            day = self._previous_busy_day(day)
        return None

    def check_fires(self, t: datetime) -> None:
        """NoFireSurvives (naming ``gaffer.skip_on``) when no fire after ``t`` survives
        the calendars in the walk's reach (a schedule every fire of which is skipped)."""
        self.next_after(t)

    def count_between(self, start: datetime, end: datetime, limit: int) -> int:
        count = 0
        for count, _fire in enumerate(self.fires_between(start, end), 1):
            if count >= limit:
                break
        return count

    def fates_between(self, start: datetime, end: datetime, limit: int | None = None) -> list[Fate]:
        """The plain schedule's fires in ``(start, end]`` that the calendar skips or moves,
        oldest first (the latest ``limit`` of them; None: all)."""
        after, until = aware_utc(start, "start"), aware_utc(end, "end")
        found: list[Fate] = []
        day, last = self._day(after), self._day(until)
        while day <= last:
            if self._reason(day) is not None:
                for fire in self._plain_fires_on(day):
                    fate = self.fate(fire)
                    if fate is not None and after < fire <= until:
                        found.append(fate)
                day += _ONE_DAY
                continue
            plain = self.schedule.next_after(self._start(day + _ONE_DAY))
            if plain is None:
                break
            day = max(day + _ONE_DAY, self._day(plain))
        return found if limit is None else found[-limit:]

    def __repr__(self) -> str:
        return f"CalendarView({self.schedule!r}, {self.rule.skip_on!r}, {self.rule.on_skip!r})"


__all__ = [
    "MAX_MOVE_DAYS",
    "NO_FIRE_SPAN",
    "NO_FIRE_STEPS",
    "ON_SKIP",
    "CalendarRule",
    "CalendarView",
    "Fate",
    "NoFireSurvives",
    "rule_options",
    "stored_rule",
    "validate_calendar_name",
    "validate_calendars",
    "zone_name",
]
