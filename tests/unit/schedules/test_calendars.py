"""Business calendars (pure): which fires ``skip_on`` calendars skip or move, checked
against the ``holidays`` package's own dates."""

from __future__ import annotations

from datetime import date, datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest

from celery_gaffer import InvalidInput, at, cron, every
from celery_gaffer.schedules.bounds import Bounds
from celery_gaffer.schedules.calendars import (
    CalendarRule,
    CalendarView,
    NoFireSurvives,
    validate_calendars,
)
from celery_gaffer.schedules.spec import validate_entry

UTC = timezone.utc
ONE_DAY = timedelta(days=1)
LONDON = ZoneInfo("Europe/London")


def view(expr: str, tz: str, skip_on: list[str], on_skip: str = "skip") -> CalendarView:
    rule = validate_calendars({"skip_on": skip_on, "on_skip": on_skip})
    assert rule is not None
    return CalendarView(cron(expr, tz), rule)


def local(fires: object, zone: ZoneInfo = LONDON) -> list[str]:
    return [f.astimezone(zone).strftime("%a %Y-%m-%d %H:%M") for f in fires]  # type: ignore[attr-defined]


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)  # type: ignore[misc]


def test_gb_christmas_and_boxing_day_observed_are_skipped_and_recorded_with_their_names() -> None:
    daily = view("0 9 * * *", "Europe/London", ["holidays:GB"])
    fires = daily.fires_between(utc(2026, 12, 24), utc(2026, 12, 30))
    assert local(fires) == [
        "Thu 2026-12-24 09:00",
        # Boxing Day is a Saturday: a holiday, and observed on Monday too.
        "Sun 2026-12-27 09:00",
        "Tue 2026-12-29 09:00",
    ]
    texts = [fate.text for fate in daily.fates_between(utc(2026, 12, 24), utc(2026, 12, 30))]
    assert texts == [
        "2026-12-25: Christmas Day, holidays:GB → skipped",
        "2026-12-26: Boxing Day, holidays:GB → skipped",
        "2026-12-28: Boxing Day (observed), holidays:GB → skipped",
    ]


def test_next_day_chains_across_weekends_and_holidays_and_a_moved_fire_is_sent_once() -> None:
    weekdays = view("0 9 * * *", "Europe/London", ["weekends", "holidays:GB"], "next_day")
    fires = list(weekdays.fires_between(utc(2026, 12, 23), utc(2027, 1, 6)))
    # Christmas (Fri), the weekend and Boxing Day observed (Mon) all land on Tue 29:
    # one fire there, as on 4 January for New Year's Day and its weekend.
    assert local(fires) == [
        "Wed 2026-12-23 09:00",
        "Thu 2026-12-24 09:00",
        "Tue 2026-12-29 09:00",
        "Wed 2026-12-30 09:00",
        "Thu 2026-12-31 09:00",
        "Mon 2027-01-04 09:00",
        "Tue 2027-01-05 09:00",
    ]
    fates = weekdays.fates_between(utc(2026, 12, 24), utc(2026, 12, 29))
    assert fates[-1].text == (
        "2026-12-28: Boxing Day (observed), holidays:GB → moved to 2026-12-29"
    )


def test_previous_day_moves_a_monday_fire_back_over_the_weekend_and_christmas() -> None:
    mondays = view("0 9 * * 1", "Europe/London", ["weekends", "holidays:GB"], "previous_day")
    fires = mondays.fires_between(utc(2026, 12, 20), utc(2027, 1, 12))
    assert local(fires) == ["Mon 2026-12-21 09:00", "Thu 2026-12-24 09:00", "Mon 2027-01-04 09:00",
                            "Mon 2027-01-11 09:00"]  # fmt: skip
    moved = mondays.moved_here(utc(2026, 12, 24, 9))
    assert moved is not None
    assert moved.text == "2026-12-28: Boxing Day (observed), holidays:GB → moved to 2026-12-24"
    # Asked from either side, the moved fire is the same one.
    assert mondays.next_after(utc(2026, 12, 22)) == utc(2026, 12, 24, 9)
    assert mondays.last_at_or_before(utc(2026, 12, 31)) == utc(2026, 12, 24, 9)
    assert mondays.count_between(utc(2026, 12, 20), utc(2027, 1, 12), 100) == 4


def test_us_ca_cesar_chavez_day_is_a_state_holiday_only() -> None:
    california = view("0 8 * * *", "America/Los_Angeles", ["holidays:US-CA"])
    federal = view("0 8 * * *", "America/Los_Angeles", ["holidays:US"])
    start, end = utc(2026, 3, 30, 12), utc(2026, 4, 1, 18)
    la = ZoneInfo("America/Los_Angeles")
    assert local(california.fires_between(start, end), la) == ["Mon 2026-03-30 08:00",
                                                               "Wed 2026-04-01 08:00"]  # fmt: skip
    assert len(list(federal.fires_between(start, end))) == 3
    (fate,) = california.fates_between(start, end)
    assert fate.text == "2026-03-31: Cesar Chavez Day, holidays:US-CA → skipped"


def test_a_moved_fire_keeps_its_local_time_across_the_dst_changes() -> None:
    stored = {"close": [date(2026, 10, 24), date(2026, 10, 25), date(2027, 3, 27)]}
    rule = CalendarRule(("close",), "next_day").with_stored(stored)
    # 09:30 London: 08:30 UTC in summer, 09:30 UTC in winter.
    daily = CalendarView(cron("30 9 * * *", "Europe/London"), rule)
    autumn = list(daily.fires_between(utc(2026, 10, 23), utc(2026, 10, 27)))
    assert local(autumn) == ["Fri 2026-10-23 09:30", "Mon 2026-10-26 09:30"]
    assert autumn[-1] == utc(2026, 10, 26, 9, 30)  # after the change: GMT
    moved = daily.moved_here(utc(2026, 10, 26, 9, 30))
    assert moved is None  # Monday fires anyway: the moved fires are that one fire
    (fate_sat, fate_sun) = daily.fates_between(utc(2026, 10, 23), utc(2026, 10, 26))
    assert fate_sat.nominal == utc(2026, 10, 24, 8, 30)  # BST
    assert fate_sat.moved_to == utc(2026, 10, 26, 9, 30)  # GMT, same wall time
    assert fate_sun.moved_to == utc(2026, 10, 26, 9, 30)
    # Spring: Saturday 27 March 2027 (GMT) moves to Sunday 28th, the day clocks go forward.
    weekly = CalendarView(cron("30 9 * * 6", "Europe/London"), rule)
    (spring,) = weekly.fires_between(utc(2027, 3, 26), utc(2027, 3, 29))
    assert spring == utc(2027, 3, 28, 8, 30)  # 09:30 BST
    assert local([spring]) == ["Sun 2027-03-28 09:30"]


def test_a_moved_fire_in_the_spring_gap_follows_the_cron_rule_for_the_gap() -> None:
    rule = CalendarRule(("x",), "next_day").with_stored({"x": [date(2027, 3, 27)]})
    weekly = CalendarView(cron("30 1 * * 6", "Europe/London"), rule)
    # 01:30 does not exist on 28 March 2027: a fixed-time cron fires when the gap ends.
    (moved,) = weekly.fires_between(utc(2027, 3, 26), utc(2027, 3, 29))
    assert moved == utc(2027, 3, 28, 1, 0)


@pytest.mark.parametrize(
    ("expr", "tz", "gap_day", "on_skip", "expected"),
    [
        # Sunday 8 March 2026 has no 02:30 in New York: its fire runs at 03:00 EDT.
        ("30 2 * * *", "America/New_York", date(2026, 3, 8), "next_day", "Mon 2026-03-09 02:30"),
        (
            "30 2 * * *",
            "America/New_York",
            date(2026, 3, 8),
            "previous_day",
            "Fri 2026-03-06 02:30",
        ),
        # Sunday 28 March 2027 has no 01:30 in London: its fire runs at 02:00 BST.
        ("30 1 * * *", "Europe/London", date(2027, 3, 28), "next_day", "Mon 2027-03-29 01:30"),
        ("30 1 * * *", "Europe/London", date(2027, 3, 28), "previous_day", "Fri 2027-03-26 01:30"),
    ],
)
def test_a_fire_moved_off_a_spring_forward_day_keeps_the_schedules_own_time(
    expr: str, tz: str, gap_day: date, on_skip: str, expected: str
) -> None:
    daily = view(expr, tz, ["weekends"], on_skip)
    zone = ZoneInfo(tz)
    start = datetime.combine(gap_day, datetime.min.time(), UTC)
    fires = list(daily.fires_between(start - 4 * ONE_DAY, start + 4 * ONE_DAY))
    shown = local(fires, zone)
    # The moved fire is the target day's own fire: sent once, at the cron's time.
    assert shown.count(expected) == 1
    assert len(fires) == len(set(f.astimezone(zone).date() for f in fires))
    assert all(f.astimezone(zone).strftime("%H:%M") == expected[-5:] for f in fires)
    (sunday,) = daily.fates_between(start, start + ONE_DAY)
    assert sunday.moved_to is not None
    assert local([sunday.moved_to], zone) == [expected]


def test_a_wildcard_cron_moved_into_a_spring_gap_is_skipped_as_its_own_fire_would_be() -> None:
    rule = CalendarRule(("x",), "next_day").with_stored({"x": [date(2027, 3, 27)]})
    weekly = CalendarView(cron("*/30 1 * * 6", "Europe/London"), rule)
    # 01:00 and 01:30 do not exist on 28 March 2027: a wildcard cron does not fire then.
    assert list(weekly.fires_between(utc(2027, 3, 26), utc(2027, 3, 29))) == []
    fates = weekly.fates_between(utc(2027, 3, 26), utc(2027, 3, 29))
    assert [fate.moved_to for fate in fates] == [None, None]


def test_every_reads_dates_in_utc_and_weekends_skip() -> None:
    rule = validate_calendars({"skip_on": ["weekends"]})
    assert rule is not None
    hourly = CalendarView(every(6 * 3600), rule)
    fires = list(hourly.fires_between(utc(2026, 12, 25, 12), utc(2026, 12, 28, 6)))
    assert fires == [utc(2026, 12, 25, 18), utc(2026, 12, 28, 0), utc(2026, 12, 28, 6)]
    moved = CalendarView(every(86400), CalendarRule(("weekends",), "next_day"))
    assert list(moved.fires_between(utc(2026, 12, 25, 12), utc(2026, 12, 29))) == [
        utc(2026, 12, 28), utc(2026, 12, 29)
    ]  # fmt: skip


def test_a_bounded_window_applies_the_calendar_and_max_runs_counts_only_real_fires() -> None:
    rule = validate_calendars({"skip_on": ["weekends"]})
    bounds = Bounds(max_runs=3, calendar=rule)
    window = bounds.window(cron("0 9 * * *", "UTC"), fired=0, watermark=utc(2026, 12, 24))
    assert list(window.fires_between(utc(2026, 12, 24), utc(2026, 12, 29, 10))) == [
        utc(2026, 12, 24, 9), utc(2026, 12, 25, 9), utc(2026, 12, 28, 9), utc(2026, 12, 29, 9)
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("gaffer", "field"),
    [
        ({"skip_on": "weekends"}, "gaffer.skip_on"),
        ({"skip_on": ["holidays:XX"]}, "gaffer.skip_on"),
        ({"skip_on": ["holidays:GB-ZZ"]}, "gaffer.skip_on"),
        ({"skip_on": ["holidays:gb"]}, "gaffer.skip_on"),
        ({"skip_on": ["Bad Name"]}, "gaffer.skip_on"),
        ({"skip_on": ["weekends"], "on_skip": "tomorrow"}, "gaffer.on_skip"),
        ({"on_skip": "next_day"}, "gaffer.on_skip"),
    ],
)
def test_bad_calendar_options_name_their_field(gaffer: dict[str, object], field: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        validate_entry(name="n", task="t", schedule=cron("0 9 * * *"), gaffer=gaffer)
    assert caught.value.field == field


def test_a_one_off_takes_no_calendar_and_a_missing_stored_calendar_is_named() -> None:
    with pytest.raises(InvalidInput, match="one-off") as caught:
        validate_entry(
            name="n", task="t", schedule=at(utc(2027, 1, 1)), gaffer={"skip_on": ["weekends"]}
        )
    assert caught.value.field == "gaffer.skip_on"
    with pytest.raises(InvalidInput, match="freeze") as missing:
        CalendarRule(("freeze",)).with_stored({})
    assert missing.value.field == "gaffer.skip_on"
    spec = validate_entry(
        name="n", task="t", schedule=cron("0 9 * * *"), gaffer={"skip_on": ["holidays:GB-SCT"]}
    )
    assert spec.policy.bounds.calendar == CalendarRule(("holidays:GB-SCT",), "skip")


def test_fates_between_keeps_every_fate_unless_given_a_limit() -> None:
    every_minute = view("* * * * *", "Europe/London", ["weekends"])
    start, end = utc(2026, 3, 6, 23), utc(2026, 3, 9, 1)  # a weekend of fires
    assert len(every_minute.fates_between(start, end)) == 2 * 1440
    assert len(every_minute.fates_between(start, end, 100)) == 100


def test_a_schedule_no_fire_of_which_survives_its_calendars_is_refused_after_a_year() -> None:
    saturdays = view("0 9 * * 6", "Europe/London", ["weekends"])
    start = utc(2026, 12, 1)
    with pytest.raises(NoFireSurvives, match="the 53 fires from 2026-12-01 to 2027-12-04") as no:
        saturdays.next_after(start)
    assert no.value.field == "gaffer.skip_on"
    with pytest.raises(NoFireSurvives, match="fires from 2026-12-01 to 2025-11-29"):
        saturdays.last_at_or_before(start)
    with pytest.raises(NoFireSurvives):
        saturdays.check_fires(start)
    # Moved to Monday, every fire survives.
    moved = view("0 9 * * 6", "Europe/London", ["weekends"], "next_day")
    assert local([moved.next_after(start)]) == ["Mon 2026-12-07 09:00"]
    moved.check_fires(start)
    # A yearly fire that lands on a weekend now and then is found years ahead.
    christmas = view("0 9 25 12 *", "Europe/London", ["weekends"])
    assert local([christmas.next_after(utc(2027, 1, 1))]) == ["Mon 2028-12-25 09:00"]
    # A stored calendar holding every date of a daily schedule's next two years.
    rule = CalendarRule(("freeze",)).with_stored(
        {"freeze": [date(2027, 1, 1) + n * ONE_DAY for n in range(731)]}
    )
    frozen = CalendarView(cron("0 9 * * *", "UTC"), rule)
    with pytest.raises(NoFireSurvives, match="the 367 fires from 2026-12-31 to 2028-01-02"):
        frozen.next_after(utc(2026, 12, 31, 10))
    moving = CalendarView(cron("0 9 * * *", "UTC"), CalendarRule(rule.skip_on, "next_day",
                                                                  rule.stored))  # fmt: skip
    with pytest.raises(NoFireSurvives, match=r"gaffer\.skip_on: no fire survives"):
        moving.next_after(utc(2026, 12, 31, 10))
