"""Property: ``cron(...).fires_between`` agrees with the brute-force oracle around real
DST transitions in random IANA zones, 1970-2037, for random expressions."""

from __future__ import annotations

import functools
from datetime import datetime, timedelta, timezone
from itertools import pairwise
from zoneinfo import ZoneInfo, available_timezones

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from celery_gaffer.exceptions import InvalidSchedule
from celery_gaffer.schedules import cron

from .oracle import Expression, expected_fires, find_transitions, offset_at

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


@functools.cache
def transition_years(zone: str) -> tuple[int, ...]:
    """Years of 1970-2037 in which the zone's offset changes (probed quarterly)."""
    local = ZoneInfo(zone)
    years = []
    for year in range(1970, 2038):
        probes = [datetime(year, month, 1, tzinfo=UTC) for month in (1, 4, 7, 10)]
        probes.append(datetime(year + 1, 1, 1, tzinfo=UTC))
        if len({offset_at(local, probe) for probe in probes}) > 1:
            years.append(year)
    return tuple(years)


# Most of the 600 zones have no DST at all, or none after 1970: draw these more often.
ZONES_WITH_TRANSITIONS = [zone for zone in ZONES if transition_years(zone)]


@functools.lru_cache(maxsize=4096)
def transitions_in_year(zone: str, year: int) -> tuple[datetime, ...]:
    start = datetime(year, 1, 1, tzinfo=UTC)
    end = datetime(year + 1, 1, 1, tzinfo=UTC)
    return tuple(find_transitions(ZoneInfo(zone), start, end, timedelta(days=1)))


def transitions_in_window(zone: str, start: datetime, end: datetime) -> bool:
    return bool(find_transitions(ZoneInfo(zone), start, end, timedelta(hours=1)))


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
# Fixed-time minute fields (no leading "*"), for the fixed-time rules.
FIXED_MINUTES = st.lists(st.integers(0, 59), min_size=1, max_size=4, unique=True).map(
    lambda minutes: ",".join(str(m) for m in sorted(minutes))
)
# Transitions happen in the small hours: draw those hours often.
HOURS = field(st.one_of(st.integers(0, 4), st.integers(0, 23)), 0, 23)
DAYS_OF_MONTH = field(st.integers(1, 31), 1, 31)
MONTHS_FIELD = field(st.integers(1, 12), 1, 12, MONTHS)
WEEKDAYS = field(st.integers(0, 7), 0, 7, DAYS)


def mostly_star(strategy: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    # The window is two days wide: a restricted day or month field rarely matches in it.
    return st.one_of(*[st.just("*")] * 4, strategy)


def expressions(
    minutes: st.SearchStrategy[str], hours: st.SearchStrategy[str]
) -> st.SearchStrategy[str]:
    five_fields = st.tuples(
        minutes,
        hours,
        mostly_star(DAYS_OF_MONTH),
        mostly_star(MONTHS_FIELD),
        mostly_star(WEEKDAYS),
    ).map(" ".join)
    return st.one_of(
        st.sampled_from(MACROS),
        five_fields,
        five_fields,
        five_fields,
        # Both day fields restricted: the OR rule.
        st.tuples(minutes, hours, DAYS_OF_MONTH, st.just("*"), WEEKDAYS).map(" ".join),
    )


def hours_near(zone: str, center: datetime) -> tuple[list[int], list[int]]:
    """Local hours around the transition at ``center``, and those it skips or repeats."""
    local = ZoneInfo(zone)
    near = {(center + timedelta(minutes=m)).astimezone(local).hour for m in range(-120, 121, 15)}
    wall_before = (center - timedelta(seconds=1)).astimezone(local).replace(tzinfo=None)
    wall_after = center.astimezone(local).replace(tzinfo=None)
    # Forward: the walls in between never happen; backward: they happen twice.
    first, last = sorted([wall_before + timedelta(seconds=1), wall_after])
    critical = set()
    while first < last:
        critical.add(first.hour)
        first += timedelta(minutes=15)
    critical.add((last - timedelta(seconds=1)).hour)
    return sorted(near | critical), sorted(critical)


@st.composite
def windows(draw: st.DrawFn) -> tuple[str, datetime, datetime, datetime]:
    """A zone and a window of at most two days around one of its real transitions."""
    zone = draw(
        st.one_of(
            st.sampled_from(ODD_ZONES),
            st.sampled_from(ZONES_WITH_TRANSITIONS),
            st.sampled_from(ZONES_WITH_TRANSITIONS),
            st.sampled_from(ZONES),  # some without any transition
        )
    )
    years = transition_years(zone)
    year = draw(st.sampled_from(years) if years else st.integers(1970, 2037))
    found = transitions_in_year(zone, year)
    if found:
        center = draw(st.sampled_from(found))
    else:  # a zone without transitions that year: still a valid window
        center = datetime(year, 1, 1, tzinfo=UTC) + timedelta(seconds=draw(st.integers(0, 2**24)))
    # Mostly hours wide on each side; sometimes tiny, to probe the window's edges.
    side = st.one_of(st.integers(0, 86400), *[st.integers(3 * 3600, 86400)] * 3)
    before = timedelta(seconds=draw(side))
    after = timedelta(seconds=draw(side))
    fraction = timedelta(microseconds=draw(st.sampled_from([0, 0, 1, 500_000, 999_999])))
    # Arguments may be in any zone: the schedule's own, UTC or a fixed offset.
    shown_in = draw(st.sampled_from([UTC, ZoneInfo(zone), timezone(timedelta(hours=-5))]))
    start = (center - before + fraction).astimezone(shown_in)
    end = (center + after + fraction).astimezone(shown_in)
    return zone, center, start, end


@st.composite
def cases(draw: st.DrawFn) -> tuple[str, str, datetime, datetime]:
    """A window and an expression whose hour field often names the transition's hours."""
    zone, center, start, end = draw(windows())
    near_hours, critical_hours = hours_near(zone, center)

    def hour_field(hours: list[int]) -> st.SearchStrategy[str]:
        hour = st.sampled_from(hours)
        return st.one_of(
            hour.map(str),
            st.lists(hour, min_size=1, max_size=3, unique=True).map(
                lambda chosen: ",".join(str(h) for h in sorted(chosen))
            ),
            st.tuples(hour, hour).map(lambda pair: f"{min(pair)}-{max(pair)}"),
        )

    critical = hour_field(critical_hours)
    hours = st.one_of(critical, hour_field(near_hours), HOURS)
    expr = draw(expressions(st.one_of(FIXED_MINUTES, MINUTES), hours))
    return expr, zone, start, end


@settings(max_examples=2000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=cases())
def test_fires_between_agrees_with_the_oracle(case: tuple[str, str, datetime, datetime]) -> None:
    expr, zone, start, end = case
    try:
        schedule = cron(expr, zone)
    except InvalidSchedule:
        # The only generated expressions cron may refuse are those no day can match.
        assert Expression.parse(expr).never_matches(), expr
        return

    event("window has a transition" if transitions_in_window(zone, start, end) else "no transition")
    rules: set[str] = set()
    expected = expected_fires(expr, zone, start, end, rules)
    kind = "fixed-time" if schedule.is_fixed_time else "wildcard"
    for rule in sorted(rules) or ["no gap or repeat matched"]:
        event(f"{kind}: {rule}")
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
