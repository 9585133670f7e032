"""Worked DST examples: DESIGN.md's New York ones, and both transitions of other zones.

Expected instants are written out by hand from the rules (see docs/dst.md), in UTC.
"""

from __future__ import annotations

from datetime import date, datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest

from celery_gaffer.schedules import cron

UTC = timezone.utc


def utc(*parts: int) -> datetime:
    return datetime(*parts, tzinfo=UTC)


def fires_on_local_day(expr: str, zone: str, day: date) -> list[datetime]:
    """The fires whose local date in ``zone`` is ``day`` (windows two days wide either side)."""
    local = ZoneInfo(zone)
    start = datetime.combine(day - timedelta(days=2), datetime.min.time(), UTC)
    fires = cron(expr, zone).fires_between(start, start + timedelta(days=5))
    return [f for f in fires if f.astimezone(local).date() == day]


def wall(instants: list[datetime], zone: str) -> list[str]:
    """Instants as local wall time with offset, for readable failures."""
    return [i.astimezone(ZoneInfo(zone)).strftime("%H:%M%z") for i in instants]


# America/New_York, 2026: spring forward 03-08 02:00 EST -> 03:00 EDT (07:00Z);
# fall back 11-01 02:00 EDT -> 01:00 EST (06:00Z).
NY = "America/New_York"


def test_new_york_fixed_time_in_the_spring_gap_fires_when_the_gap_ends() -> None:
    assert fires_on_local_day("30 2 * * *", NY, date(2026, 3, 8)) == [utc(2026, 3, 8, 7, 0)]
    # The days around it are ordinary.
    assert fires_on_local_day("30 2 * * *", NY, date(2026, 3, 7)) == [utc(2026, 3, 7, 7, 30)]
    assert fires_on_local_day("30 2 * * *", NY, date(2026, 3, 9)) == [utc(2026, 3, 9, 6, 30)]


def test_new_york_fixed_time_after_the_repeat_fires_once() -> None:
    # 02:30 happens once on 11-01, after the repeated hour: 02:30-05:00.
    fires = fires_on_local_day("30 2 * * *", NY, date(2026, 11, 1))
    assert fires == [utc(2026, 11, 1, 7, 30)]
    assert wall(fires, NY) == ["02:30-0500"]


def test_new_york_fixed_time_in_the_repeated_hour_fires_at_the_first_occurrence() -> None:
    fires = fires_on_local_day("30 1 * * *", NY, date(2026, 11, 1))
    assert fires == [utc(2026, 11, 1, 5, 30)]
    assert wall(fires, NY) == ["01:30-0400"]


def test_new_york_wildcard_fires_at_both_occurrences_and_never_in_the_gap() -> None:
    fall = fires_on_local_day("0 * * * *", NY, date(2026, 11, 1))
    assert len(fall) == 25
    assert wall(fall[:4], NY) == ["00:00-0400", "01:00-0400", "01:00-0500", "02:00-0500"]
    spring = fires_on_local_day("0 * * * *", NY, date(2026, 3, 8))
    assert len(spring) == 23
    assert wall(spring[:3], NY) == ["00:00-0500", "01:00-0500", "03:00-0400"]
    assert fires_on_local_day("*/15 2 * * *", NY, date(2026, 3, 8)) == []
    assert len(fires_on_local_day("*/15 1 * * *", NY, date(2026, 11, 1))) == 8


def test_new_york_all_matches_of_one_gap_coalesce_into_one_fire() -> None:
    fires = fires_on_local_day("0,15,30,45 2 * * *", NY, date(2026, 3, 8))
    assert fires == [utc(2026, 3, 8, 7, 0)]
    # A real match at the gap's end is the same fire, not a second one.
    assert fires_on_local_day("30 2,3 * * *", NY, date(2026, 3, 8)) == [
        utc(2026, 3, 8, 7, 0),
        utc(2026, 3, 8, 7, 30),
    ]


# Europe/London, 2026: 03-29 01:00 GMT -> 02:00 BST (01:00Z); 10-25 02:00 BST -> 01:00 GMT.
LONDON = "Europe/London"


def test_london_spring_forward() -> None:
    assert fires_on_local_day("30 1 * * *", LONDON, date(2026, 3, 29)) == [utc(2026, 3, 29, 1)]
    fires = fires_on_local_day("30 * * * *", LONDON, date(2026, 3, 29))
    assert fires[:2] == [utc(2026, 3, 29, 0, 30), utc(2026, 3, 29, 1, 30)]
    assert wall(fires[:2], LONDON) == ["00:30+0000", "02:30+0100"]


def test_london_fall_back() -> None:
    assert fires_on_local_day("30 1 * * *", LONDON, date(2026, 10, 25)) == [
        utc(2026, 10, 25, 0, 30)
    ]
    fires = fires_on_local_day("30 * * * *", LONDON, date(2026, 10, 25))
    assert wall(fires[:4], LONDON) == ["00:30+0100", "01:30+0100", "01:30+0000", "02:30+0000"]
    assert len(fires) == 25


# Australia/Sydney (southern hemisphere), 2026: 04-05 03:00 AEDT -> 02:00 AEST (04-04
# 16:00Z); 10-04 02:00 AEST -> 03:00 AEDT (10-03 16:00Z).
SYDNEY = "Australia/Sydney"


def test_sydney_fall_back_in_april() -> None:
    fires = fires_on_local_day("30 2 * * *", SYDNEY, date(2026, 4, 5))
    assert fires == [utc(2026, 4, 4, 15, 30)]
    assert wall(fires, SYDNEY) == ["02:30+1100"]
    hourly = fires_on_local_day("0 * * * *", SYDNEY, date(2026, 4, 5))
    assert wall(hourly[2:5], SYDNEY) == ["02:00+1100", "02:00+1000", "03:00+1000"]


def test_sydney_spring_forward_in_october() -> None:
    assert fires_on_local_day("30 2 * * *", SYDNEY, date(2026, 10, 4)) == [utc(2026, 10, 3, 16)]
    assert fires_on_local_day("*/30 2 * * *", SYDNEY, date(2026, 10, 4)) == []
    hourly = fires_on_local_day("0 * * * *", SYDNEY, date(2026, 10, 4))
    assert wall(hourly[1:3], SYDNEY) == ["01:00+1000", "03:00+1100"]


# Australia/Lord_Howe (30-minute shift): 2025-10-05 02:00 +10:30 -> 02:30 +11 (10-04
# 15:30Z); 2026-04-05 02:00 +11 -> 01:30 +10:30 (04-04 15:00Z).
LORD_HOWE = "Australia/Lord_Howe"


def test_lord_howe_spring_forward_by_half_an_hour() -> None:
    day = date(2025, 10, 5)
    assert fires_on_local_day("15 2 * * *", LORD_HOWE, day) == [utc(2025, 10, 4, 15, 30)]
    assert wall(fires_on_local_day("*/15 2 * * *", LORD_HOWE, day), LORD_HOWE) == [
        "02:30+1100",
        "02:45+1100",
    ]
    # cronsim's own zone mode skips 03:00 and 03:15 here.
    assert wall(fires_on_local_day("*/15 3 * * *", LORD_HOWE, day), LORD_HOWE) == [
        "03:00+1100",
        "03:15+1100",
        "03:30+1100",
        "03:45+1100",
    ]


def test_lord_howe_fall_back_by_half_an_hour() -> None:
    day = date(2026, 4, 5)
    assert fires_on_local_day("45 1 * * *", LORD_HOWE, day) == [utc(2026, 4, 4, 14, 45)]
    assert wall(fires_on_local_day("*/15 1 * * *", LORD_HOWE, day), LORD_HOWE) == [
        "01:00+1100",
        "01:15+1100",
        "01:30+1100",
        "01:45+1100",
        "01:30+1030",
        "01:45+1030",
    ]
    # cronsim's own zone mode skips 02:00 and 02:15 here.
    assert wall(fires_on_local_day("*/15 2 * * *", LORD_HOWE, day), LORD_HOWE) == [
        "02:00+1030",
        "02:15+1030",
        "02:30+1030",
        "02:45+1030",
    ]


# Pacific/Apia skipped 2011-12-30: 12-29 23:59:59 -10 was followed by 12-31 00:00 +14.
APIA = "Pacific/Apia"


@pytest.mark.parametrize("expr", ["0 12 * * *", "30 2 * * *", "@daily", "0 * * * *", "*/5 * * * *"])
def test_apia_has_no_fire_on_the_skipped_day(expr: str) -> None:
    assert fires_on_local_day(expr, APIA, date(2011, 12, 30)) == []
    assert fires_on_local_day(expr, APIA, date(2011, 12, 29))
    assert fires_on_local_day(expr, APIA, date(2011, 12, 31))


def test_apia_daily_fire_of_the_skipped_day_coalesces_at_its_end() -> None:
    fires = list(cron("0 12 * * *", APIA).fires_between(utc(2011, 12, 29), utc(2011, 12, 31)))
    assert fires == [utc(2011, 12, 29, 22), utc(2011, 12, 30, 10), utc(2011, 12, 30, 22)]
    assert wall(fires, APIA) == ["12:00-1000", "00:00+1400", "12:00+1400"]
    # The skipped day's midnight and 12-31's own are the same instant: one fire.
    midnight = list(cron("@daily", APIA).fires_between(utc(2011, 12, 29), utc(2011, 12, 31)))
    assert midnight == [utc(2011, 12, 29, 10), utc(2011, 12, 30, 10)]
    assert wall(midnight, APIA) == ["00:00-1000", "00:00+1400"]


def test_gap_at_midnight_sao_paulo() -> None:
    # 2018-11-04 00:00 -03 -> 01:00 -02 (03:00Z): midnight did not exist.
    assert fires_on_local_day("0 0 * * *", "America/Sao_Paulo", date(2018, 11, 4)) == [
        utc(2018, 11, 4, 3)
    ]
    assert fires_on_local_day("*/30 0 * * *", "America/Sao_Paulo", date(2018, 11, 4)) == []


def test_gap_ending_off_the_minute_monrovia_1972() -> None:
    # Liberia moved from -0:44:30 to UTC at 1972-01-07 00:00 local: the gap ended at
    # 00:44:30 UTC. cronsim's own zone mode rounds that to 00:45.
    fires = cron("44 0 * * *", "Africa/Monrovia").fires_between(utc(1972, 1, 6), utc(1972, 1, 9))
    assert list(fires) == [
        utc(1972, 1, 6, 1, 28, 30),
        utc(1972, 1, 7, 0, 44, 30),
        utc(1972, 1, 8, 0, 44),
    ]


def test_next_after_inside_the_repeated_hour_sees_the_second_pass() -> None:
    schedule = cron("*/20 1 * * *", NY)
    # 01:50-04:00: the next fire is 01:00-05:00, whose wall time is earlier.
    assert schedule.next_after(utc(2026, 11, 1, 5, 50)) == utc(2026, 11, 1, 6, 0)
    assert schedule.next_after(utc(2026, 11, 1, 6, 40)) == utc(2026, 11, 2, 6, 0)
    fixed = cron("20 1 * * *", NY)
    assert fixed.next_after(utc(2026, 11, 1, 5, 50)) == utc(2026, 11, 2, 6, 20)
