"""``at`` and schedule bounds as pure logic: the window a bounded schedule is seen
through, and what a tick decides with ``max_runs``."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from celery_gaffer import At, InvalidInput, InvalidSchedule, at
from celery_gaffer.beat.catchup import decide
from celery_gaffer.schedules import cron, every, schedule_from_dict
from celery_gaffer.schedules.bounds import Bounds, Window, validate_bounds
from celery_gaffer.schedules.spec import Policy

UTC = timezone.utc
T0 = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
ON_TIME = timedelta(seconds=10)


def minutes(n: int) -> datetime:
    return T0 + timedelta(minutes=n)


def test_at_fires_once_rounded_up_to_the_second_and_round_trips() -> None:
    paris = ZoneInfo("Europe/Paris")
    one = at(datetime(2026, 12, 24, 9, 0, 0, 250_000, tzinfo=paris))
    assert one.when == datetime(2026, 12, 24, 8, 0, 1, tzinfo=UTC)  # never early
    assert one.tz == "Europe/Paris"
    assert one.next_after(one.when - timedelta(seconds=1)) == one.when
    assert one.next_after(one.when) is None
    assert list(one.fires_between(T0, one.when)) == [one.when]
    assert list(one.fires_between(one.when, one.when + timedelta(days=1))) == []
    assert one.last_at_or_before(one.when + timedelta(days=400)) == one.when
    assert one.count_between(T0, one.when, 5) == 1
    assert schedule_from_dict(one.to_dict()) == one
    assert isinstance(schedule_from_dict(one.to_dict()), At)
    assert repr(one) == "at('2026-12-24T09:00:01+01:00')"


def test_a_fixed_offset_at_is_shown_in_utc_and_bad_input_names_when() -> None:
    assert at(datetime(2026, 1, 1, tzinfo=timezone(timedelta(hours=3)))).tz == "UTC"
    with pytest.raises(InvalidSchedule) as naive:
        at(datetime(2026, 1, 1))
    assert naive.value.field == "when"
    with pytest.raises(InvalidSchedule) as text:
        schedule_from_dict({"kind": "at", "when": "soon"})
    assert text.value.field == "when"


def test_a_window_keeps_only_the_fires_inside_both_bounds_inclusive() -> None:
    window = Window(every(60), minutes(3), minutes(6))
    assert list(window.fires_between(T0, minutes(60))) == [minutes(k) for k in range(3, 7)]
    assert window.next_after(T0) == minutes(3)
    assert window.next_after(minutes(6)) is None
    assert window.last_at_or_before(minutes(60)) == minutes(6)
    assert window.last_at_or_before(minutes(2)) is None
    assert window.count_between(T0, minutes(60), 100) == 4
    # A start between two fires: the first fire is the one after it.
    assert Window(every(60), minutes(3) + timedelta(seconds=1), None).next_after(T0) == minutes(4)


@settings(max_examples=200, deadline=None)
@given(
    start=st.integers(min_value=-5000, max_value=5000),
    length=st.integers(min_value=0, max_value=5000),
    low=st.integers(min_value=-6000, max_value=6000),
    span=st.integers(min_value=0, max_value=6000),
    interval=st.sampled_from([1, 7, 60, 600]),
)
def test_a_window_answers_what_filtering_every_fire_answers(
    start: int, length: int, low: int, span: int, interval: int
) -> None:
    schedule = every(interval)
    start_at = T0 + timedelta(seconds=start, microseconds=start % 3 * 250_000)
    end_at = start_at + timedelta(seconds=length)
    window = Window(schedule, start_at, end_at)
    a, b = T0 + timedelta(seconds=low), T0 + timedelta(seconds=low + span)
    expected = [f for f in schedule.fires_between(a, b) if start_at <= f <= end_at]
    assert list(window.fires_between(a, b)) == expected
    assert window.count_between(a, b, 10**9) == len(expected)
    inside = [f for f in schedule.fires_between(a, b + timedelta(seconds=interval))]
    following = next((f for f in inside if start_at <= f <= end_at and f > a), None)
    if following is not None and following <= b:
        assert window.next_after(a) == following
    last = [f for f in schedule.fires_between(a - timedelta(seconds=6000), b)]
    last_inside = [f for f in last if start_at <= f <= end_at]
    if last_inside:
        assert window.last_at_or_before(b) == last_inside[-1]


@pytest.mark.parametrize("catchup", ["latest", "all", "skip"])
def test_a_tick_sends_no_more_than_the_runs_left_and_then_has_no_next_fire(catchup: str) -> None:
    bounds = Bounds(max_runs=2)
    schedule = every(60)
    decision = decide(
        bounds.window(schedule, fired=1, watermark=T0),
        Policy(catchup=catchup),
        T0,
        minutes(1),
        max_catchup=100,
        on_time=ON_TIME,
        runs_left=bounds.runs_left(1),
    )
    assert decision.send == (minutes(1),)
    assert decision.next_fire_at is None
    # None left: the window ends at the watermark, nothing is sent.
    spent = bounds.window(schedule, fired=2, watermark=minutes(1))
    assert spent.next_after(minutes(1)) is None
    assert bounds.finished(schedule, fired=2, watermark=minutes(1))
    assert not bounds.finished(schedule, fired=1, watermark=minutes(1))


def test_catchup_all_with_runs_left_sends_the_oldest_and_counts_the_rest_skipped() -> None:
    decision = decide(
        every(60),
        Policy(catchup="all"),
        T0,
        minutes(10),
        max_catchup=100,
        on_time=ON_TIME,
        runs_left=3,
    )
    assert decision.send == (minutes(1), minutes(2), minutes(3))
    assert decision.skipped == 7
    assert decision.next_fire_at is None


def test_missed_fires_do_not_spend_runs() -> None:
    decision = decide(
        every(60),
        Policy(catchup="all", starting_deadline=120),
        T0,
        minutes(10),
        max_catchup=100,
        on_time=ON_TIME,
        runs_left=2,
    )
    assert decision.send == (minutes(8), minutes(9))
    assert len(decision.missed) == 7
    assert decision.next_fire_at is None


def test_a_bounded_cron_window_over_a_dst_gap_keeps_the_gap_rule() -> None:
    london = cron("30 1 * * *", "Europe/London")  # 01:30 is skipped on 2027-03-28
    window = Bounds(
        start_at=datetime(2027, 3, 27, tzinfo=UTC), end_at=datetime(2027, 3, 29, 12, tzinfo=UTC)
    ).window(london, fired=0, watermark=datetime(2027, 3, 1, tzinfo=UTC))
    fires = list(
        window.fires_between(datetime(2027, 3, 1, tzinfo=UTC), datetime(2028, 1, 1, tzinfo=UTC))
    )
    assert fires == [
        datetime(2027, 3, 27, 1, 30, tzinfo=UTC),
        datetime(2027, 3, 28, 1, 0, tzinfo=UTC),  # the gap's end (02:00 BST)
        datetime(2027, 3, 29, 0, 30, tzinfo=UTC),
    ]


def test_validate_bounds_reads_text_and_datetimes_and_names_bad_fields() -> None:
    bounds = validate_bounds({"start_at": "2026-01-01T00:00Z", "end_at": minutes(0), "max_runs": 3})
    assert bounds == Bounds(datetime(2026, 1, 1, tzinfo=UTC), T0, 3)
    for options, field in [
        ({"start_at": 5}, "gaffer.start_at"),
        ({"end_at": "2026-01-01T00:00"}, "gaffer.end_at"),  # no offset
        ({"max_runs": 2**31}, "gaffer.max_runs"),
        ({"max_runs": 1.0}, "gaffer.max_runs"),
        ({"start_at": minutes(5), "end_at": minutes(4)}, "gaffer.end_at"),
    ]:
        with pytest.raises(InvalidInput) as caught:
            validate_bounds(options)
        assert caught.value.field == field, options
