"""Upcoming fires with their calendar reasons (pure): where the list starts, and which
fires carry a reason."""

from __future__ import annotations

from datetime import date, datetime, timezone

from celery_gaffer.schedules.calendars import CalendarRule
from celery_gaffer.schedules.kinds import at, cron, every
from celery_gaffer.schedules.upcoming import (
    calendar_view,
    first_listed,
    listed_fires,
    upcoming,
    with_known_dates,
)

UTC = timezone.utc
FREEZE = CalendarRule(("freeze",), "skip")


def nine(day: int, month: int = 12, year: int = 2026) -> datetime:
    return datetime(year, month, day, 9, tzinfo=UTC)


def test_known_dates_fill_the_stored_calendars_and_a_missing_one_holds_none() -> None:
    rule = with_known_dates(FREEZE, {"freeze": [date(2026, 12, 28)], "other": []})
    assert rule is not None
    assert rule.reason(date(2026, 12, 28)) == ("freeze", "freeze")
    empty = with_known_dates(FREEZE, {})
    assert empty is not None
    assert empty.reason(date(2026, 12, 28)) is None
    weekends = CalendarRule(("weekends",))
    assert with_known_dates(weekends, {}) is weekends
    assert with_known_dates(None, {}) is None


def test_no_view_without_a_calendar_or_for_a_one_off() -> None:
    assert calendar_view(cron("0 9 * * *"), None) is None
    assert calendar_view(None, FREEZE) is None
    assert calendar_view(at(nine(28)), FREEZE) is None


def test_the_list_starts_at_the_first_fire_the_calendar_skipped() -> None:
    rule = with_known_dates(FREEZE, {"freeze": [date(2026, 12, 28), date(2026, 12, 29)]})
    daily = cron("0 9 * * *")
    view = calendar_view(daily, rule)
    watermark = datetime(2026, 12, 27, 12, tzinfo=UTC)
    start = first_listed(view, watermark, nine(30))
    assert start == nine(28)
    fires = upcoming(view, daily, start, 4)
    assert [(f.at.day, f.reason) for f in fires] == [
        (28, "2026-12-28: in freeze → skipped"),
        (29, "2026-12-29: in freeze → skipped"),
        (30, None),
        (31, None),
    ]
    # Before start_at the skipped fires are not the schedule's: the list starts at the next.
    assert first_listed(view, watermark, nine(30), start_at=nine(30)) == nine(30)
    assert first_listed(None, watermark, nine(30)) == nine(30)


def test_a_fire_moved_back_to_a_decided_time_is_not_listed_again() -> None:
    rule = with_known_dates(
        CalendarRule(("freeze",), "previous_day"), {"freeze": [date(2026, 12, 31)]}
    )
    thursdays = cron("0 9 * * 4")
    view = calendar_view(thursdays, rule)
    # Wednesday 30's moved fire was sent (the watermark is there): the list starts at 7 Jan.
    assert first_listed(view, nine(30), nine(7, 1, 2027)) == nine(7, 1, 2027)
    # Before it is sent, the list starts at the next fire (Wednesday 30, a moved one): its
    # first plain fire is Thursday 31, listed with where it went.
    start = first_listed(view, nine(29), nine(30))
    assert start == nine(30)
    fires = upcoming(view, thursdays, start, 2)
    assert [(f.at, f.reason) for f in fires] == [
        (nine(31), "2026-12-31: in freeze → moved to 2026-12-30"),
        (nine(7, 1, 2027), None),
    ]


def test_listed_fires_start_at_or_after_the_start_as_explain_lists_them() -> None:
    poll = every(3600)
    start = datetime(2026, 12, 28, 9, 0, 0, 500_000, tzinfo=UTC)
    assert listed_fires(poll, start, 2) == [nine(28), datetime(2026, 12, 28, 10, tzinfo=UTC)]
    assert [f.reason for f in upcoming(None, poll, start, 2)] == [None, None]
