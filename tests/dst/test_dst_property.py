"""Property: ``cron(...).fires_between`` agrees with the brute-force oracle around real
DST transitions in random IANA zones, 1970-2037, for random expressions."""

from __future__ import annotations

import functools
from datetime import datetime, timedelta, timezone
from itertools import pairwise
from zoneinfo import ZoneInfo, available_timezones

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from celery_gaffer.exceptions import InvalidSchedule
from celery_gaffer.schedules import cron

from .oracle import Expression, expected_fires, find_transitions

UTC = timezone.utc
ZONES = sorted(available_timezones())
# Zones whose transitions are unusual; drawn as often as all the others together.
ODD_ZONES = [
    "America/New_York",
    "Europe/London",
    "Australia/Sydney",
    "Australia/Lord_Howe",  # 30-minute shift
    "Pacific/Apia",  # skipped 2011-12-30
    "Pacific/Kiritimati",  # skipped 1994-12-31
    "Pacific/Kwajalein",  # skipped 1993-08-21
    "Africa/Monrovia",  # gap ending at 00:44:30 UTC in 1972
    "America/Sao_Paulo",  # gap at midnight
    "America/Havana",  # gap at midnight
    "Antarctica/Troll",  # two-hour shift
    "Africa/Casablanca",  # DST suspended for Ramadan, negative DST since 2018
    "Europe/Dublin",  # negative DST in the tz source
    "Asia/Gaza",
    "Pacific/Chatham",  # +12:45/+13:45
    "America/St_Johns",  # -3:30/-2:30
    "Asia/Tehran",
    "Europe/Moscow",
    "America/Santiago",
]
MONTHS = ["JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"]
DAYS = ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"]
MACROS = ["@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly"]


@functools.lru_cache(maxsize=4096)
def transitions_in_year(zone: str, year: int) -> tuple[datetime, ...]:
    start = datetime(year, 1, 1, tzinfo=UTC)
    end = datetime(year + 1, 1, 1, tzinfo=UTC)
    return tuple(find_transitions(ZoneInfo(zone), start, end, timedelta(days=1)))


def _token(draw: st.DrawFn, value: int, names: list[str] | None, low: int) -> str:
    """``value`` as a number or, sometimes, its name in random case."""
    index = value - low
    if names and 0 <= index < len(names) and draw(st.booleans()):
        name = names[index]
        return draw(st.sampled_from([name, name.lower(), name.title()]))
    return str(value)


def field(values: st.SearchStrategy[int], low: int, high: int, names: list[str] | None = None):
    @st.composite
    def item(draw: st.DrawFn) -> str:
        shape = draw(st.sampled_from(["one", "range", "range/step", "star/step", "one/step"]))
        first = draw(values)
        step = draw(st.integers(1, high - low + 1))
        if shape == "one":
            return _token(draw, first, names, low)
        if shape == "star/step":
            return f"*/{step}"
        if shape == "one/step":
            return f"{first}/{step}"
        last = draw(st.integers(first, high))
        text = f"{_token(draw, first, names, low)}-{_token(draw, last, names, low)}"
        return text if shape == "range" else f"{text}/{step}"

    return st.one_of(
        st.just("*"),
        st.integers(1, high - low + 1).map(lambda step: f"*/{step}"),
        st.lists(item(), min_size=1, max_size=3).map(",".join),
    )


MINUTES = field(st.one_of(st.sampled_from([0, 15, 30, 45]), st.integers(0, 59)), 0, 59)
# Transitions happen in the small hours: draw those hours often.
HOURS = field(st.one_of(st.integers(0, 4), st.integers(0, 23)), 0, 23)
DAYS_OF_MONTH = field(st.integers(1, 31), 1, 31)
MONTHS_FIELD = field(st.integers(1, 12), 1, 12, MONTHS)
WEEKDAYS = field(st.integers(0, 7), 0, 7, DAYS)


def mostly_star(strategy: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    # The window is two days wide: a restricted day or month field rarely matches in it.
    return st.one_of(st.just("*"), st.just("*"), strategy)


EXPRESSIONS = st.one_of(
    st.sampled_from(MACROS),
    st.tuples(
        MINUTES, HOURS, mostly_star(DAYS_OF_MONTH), mostly_star(MONTHS_FIELD), mostly_star(WEEKDAYS)
    ).map(" ".join),
    # Both day fields restricted: the OR rule.
    st.tuples(MINUTES, HOURS, DAYS_OF_MONTH, st.just("*"), WEEKDAYS).map(" ".join),
)


@st.composite
def windows(draw: st.DrawFn) -> tuple[str, datetime, datetime]:
    """A zone and a window of at most two days around one of its real transitions."""
    zone = draw(st.one_of(st.sampled_from(ODD_ZONES), st.sampled_from(ZONES)))
    year = draw(st.integers(1970, 2037))
    found = transitions_in_year(zone, year)
    if found:
        center = draw(st.sampled_from(found))
    else:  # a zone without transitions that year: still a valid window
        center = datetime(year, 1, 1, tzinfo=UTC) + timedelta(seconds=draw(st.integers(0, 2**24)))
    before = timedelta(seconds=draw(st.integers(0, 86400)))
    after = timedelta(seconds=draw(st.integers(0, 86400)))
    fraction = timedelta(microseconds=draw(st.sampled_from([0, 0, 1, 500_000, 999_999])))
    # Arguments may be in any zone: the schedule's own, UTC or a fixed offset.
    shown_in = draw(st.sampled_from([UTC, ZoneInfo(zone), timezone(timedelta(hours=-5))]))
    start = (center - before + fraction).astimezone(shown_in)
    end = (center + after + fraction).astimezone(shown_in)
    return zone, start, end


@settings(max_examples=2000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(expr=EXPRESSIONS, window=windows())
def test_fires_between_agrees_with_the_oracle(
    expr: str, window: tuple[str, datetime, datetime]
) -> None:
    zone, start, end = window
    try:
        schedule = cron(expr, zone)
    except InvalidSchedule:
        # The only generated expressions cron may refuse are those no day can match.
        assert Expression.parse(expr).never_matches(), expr
        return

    expected = expected_fires(expr, zone, start, end)
    actual = list(schedule.fires_between(start, end))

    assert actual == expected
    assert all(f.tzinfo is UTC and f.microsecond == 0 for f in actual)
    first = schedule.next_after(start)
    if expected:
        assert first == expected[0]
    else:
        assert first is None or first > end
    # next_after walks the same fires one by one (a sample, to keep the run short).
    for earlier, later in list(pairwise(expected))[:: max(1, len(expected) // 20)]:
        assert schedule.next_after(earlier) == later
        assert schedule.next_after(later - timedelta(seconds=1)) == later
