"""A schedule's upcoming fires with the reason of each one its calendars skip or move
(pure: no I/O).

``celery gaffer explain``, the console's schedule page and API, ``celery gaffer schedules
--json`` and the Django admin list the fires of the plain schedule, from its next fire,
and give each one its ``skip_on`` calendars skip or move the text of its
:class:`~.calendars.Fate` ("2026-12-28: Boxing Day (observed), holidays:GB → moved to
2026-12-29"); the others have none. The list starts earlier than the stored next fire
when the calendar skipped or moved the fires before it (those are listed first, with
their reasons), so a skipped Monday shows before the Tuesday that is sent.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import date, datetime, timedelta

from .calendars import CalendarRule, CalendarView, Fate
from .kinds import At, Schedule

_ONE_SECOND = timedelta(seconds=1)
# Plain fires looked at between the watermark and the next fire for the first one listed.
_MAX_LOOK = 1_000


@dataclass(frozen=True, slots=True)
class Upcoming:
    """One fire of the plain schedule; ``fate``: what its calendar does to it, if anything."""

    at: datetime
    fate: Fate | None = None

    @property
    def reason(self) -> str | None:
        """The fate's text (``explain`` shows the same), None for a fire sent as it is."""
        return None if self.fate is None else self.fate.text


def with_known_dates(
    rule: CalendarRule | None, calendars: Mapping[str, Iterable[date]]
) -> CalendarRule | None:
    """``rule`` with its stored calendars' dates taken from ``calendars`` (every stored
    calendar, by name); one missing from it holds no date (what is shown never fails)."""
    if rule is None or not rule.stored_names:
        return rule
    return rule.with_stored({name: calendars.get(name, ()) for name in rule.stored_names})


def calendar_view(schedule: Schedule | None, rule: CalendarRule | None) -> CalendarView | None:
    """``schedule`` seen through ``rule``; None without either (or for a one-off)."""
    if schedule is None or rule is None or isinstance(schedule, At):
        return None
    return CalendarView(schedule, rule)


def first_listed(
    view: CalendarView | None,
    watermark: datetime,
    next_fire: datetime,
    start_at: datetime | None = None,
) -> datetime:
    """Where a list of next fires starts: ``next_fire``, or the plain schedule's first
    fire after ``watermark`` (at or after ``start_at``) when the calendar skipped or moved
    it (a fire moved to a time already decided does not count: it was sent)."""
    if view is None:
        return next_fire
    fire = view.schedule.next_after(watermark)
    for _ in range(_MAX_LOOK):
        if fire is None or fire >= next_fire:
            break
        fate = None if start_at is not None and fire < start_at else view.fate(fire)
        if fate is not None and (fate.moved_to is None or fate.moved_to > watermark):
            return fire
        fire = view.schedule.next_after(fire)
    return next_fire


def listed_fires(schedule: Schedule, start: datetime, count: int) -> list[datetime]:
    """The first ``count`` fires of ``schedule`` at or after ``start`` (as ``explain``
    lists them)."""
    found: list[datetime] = []
    fire = schedule.next_after(start.replace(microsecond=0) - _ONE_SECOND)
    while fire is not None and len(found) < count:
        found.append(fire)
        fire = schedule.next_after(fire)
    return found


def with_reasons(view: CalendarView | None, fires: Iterable[datetime]) -> list[Upcoming]:
    """Each of the plain schedule's ``fires`` with what its calendar does to it."""
    if view is None:
        return [Upcoming(fire) for fire in fires]
    return [Upcoming(fire, view.fate(fire)) for fire in fires]


def upcoming(
    view: CalendarView | None,
    schedule: Schedule,
    start: datetime,
    count: int,
) -> list[Upcoming]:
    """The first ``count`` fires of the plain ``schedule`` at or after ``start``, each
    with its calendar fate (``view``: the schedule seen through its calendar)."""
    return with_reasons(view, listed_fires(schedule, start, count))


__all__ = [
    "Upcoming",
    "calendar_view",
    "first_listed",
    "listed_fires",
    "upcoming",
    "with_known_dates",
    "with_reasons",
]
