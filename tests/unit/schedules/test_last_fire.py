"""``last_at_or_before`` and ``count_between`` agree with walking the fires forward."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from hypothesis import given, settings
from hypothesis import strategies as st

from celery_gaffer.schedules import cron, every

UTC = timezone.utc
EXPRS = st.sampled_from(
    [
        ("* * * * *", "UTC"),
        ("30 2 * * *", "America/New_York"),
        ("0 * * * *", "America/New_York"),
        ("30 1 * * *", "America/New_York"),
        ("*/30 * * * *", "Australia/Lord_Howe"),
        ("0 0 * * *", "Pacific/Apia"),
        ("0 0 1 1 *", "Asia/Kolkata"),
        ("0 12 29 2 *", "Europe/London"),
    ]
)
WHEN = st.datetimes(
    min_value=datetime(2010, 1, 1), max_value=datetime(2030, 12, 31), timezones=st.just(UTC)
)


def _walked_last(schedule, t: datetime):  # type: ignore[no-untyped-def]
    """The last fire <= t, by walking forward from far enough back (the oracle)."""
    last = None
    for back in (timedelta(days=2), timedelta(days=366 * 9)):
        for fire in schedule.fires_between(t - back, t):
            last = fire
        if last is not None:
            return last
    return last


@settings(max_examples=120, deadline=None)
@given(expr=EXPRS, t=WHEN)
def test_cron_last_at_or_before_is_the_last_fire_walking_forward_finds(
    expr: tuple[str, str], t: datetime
) -> None:
    schedule = cron(*expr)
    assert schedule.last_at_or_before(t) == _walked_last(schedule, t)


@settings(max_examples=200, deadline=None)
@given(
    interval=st.integers(min_value=1, max_value=10**6),
    anchor=WHEN,
    t=WHEN,
    span=st.integers(min_value=0, max_value=10**6),
)
def test_every_last_fire_and_count_by_arithmetic_match_the_walk(
    interval: int, anchor: datetime, t: datetime, span: int
) -> None:
    schedule = every(interval, anchor=anchor)
    last = schedule.last_at_or_before(t)
    assert last is not None
    assert last <= t < last + timedelta(seconds=interval)
    start = t - timedelta(seconds=span)
    walked = sum(1 for _ in schedule.fires_between(start, t))
    assert schedule.count_between(start, t, 10**9) == walked
    assert schedule.count_between(start, t, 3) == min(walked, 3)


def test_before_the_first_fire_of_time_there_is_no_last_fire() -> None:
    assert cron("0 12 * * *").last_at_or_before(datetime(1, 1, 1, 6, tzinfo=UTC)) is None


def test_cron_jitter_must_stay_below_the_shortest_gap_dst_included() -> None:
    import pytest

    from celery_gaffer.exceptions import InvalidSchedule

    assert cron("30 2 * * *", "America/New_York").shortest_gap() == 23.5 * 3600
    cron("30 2 * * *", "America/New_York", jitter=23 * 3600)
    with pytest.raises(InvalidSchedule, match="shortest gap") as info:
        cron("30 2 * * *", "America/New_York", jitter=23.5 * 3600)
    assert info.value.field == "jitter"
    with pytest.raises(InvalidSchedule, match="a year"):
        every(10**9, jitter=10**8)
