"""The catch-up policies as a pure function (no database, no clock but the arguments)."""

from __future__ import annotations

import time
from datetime import datetime, timedelta, timezone

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from celery_gaffer.beat.catchup import SKIPPED_COUNT_LIMIT, Decision, decide
from celery_gaffer.schedules import Cron, Every, cron, every
from celery_gaffer.schedules.spec import Policy

UTC = timezone.utc
T0 = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
ON_TIME = timedelta(seconds=10)


def minutes(*ks: int) -> tuple[datetime, ...]:
    return tuple(T0 + timedelta(minutes=k) for k in ks)


def test_a_punctual_tick_sends_the_one_due_fire_under_every_policy() -> None:
    for catchup in ("latest", "all", "skip"):
        decision = decide(
            every(60),
            Policy(catchup=catchup),
            T0,
            T0 + timedelta(minutes=1, seconds=0.2),
            max_catchup=100,
            on_time=ON_TIME,
        )
        assert decision.send == minutes(1)
        assert decision.skipped == 0
        assert decision.next_fire_at == T0 + timedelta(minutes=2)


@pytest.mark.parametrize(
    ("catchup", "send", "skipped"),
    [("latest", minutes(10), 9), ("all", minutes(*range(1, 11)), 0), ("skip", (), 10)],
)
def test_ten_missed_fires(catchup: str, send: tuple[datetime, ...], skipped: int) -> None:
    now = T0 + timedelta(minutes=10, seconds=30)
    decision = decide(every(60), Policy(catchup=catchup), T0, now, max_catchup=100, on_time=ON_TIME)
    assert decision.send == send
    assert decision.skipped == skipped
    assert decision.missed == ()
    assert decision.watermark == now
    assert decision.next_fire_at == T0 + timedelta(minutes=11)


def test_all_is_bounded_per_tick_and_resumes_from_the_last_sent() -> None:
    now = T0 + timedelta(minutes=10, seconds=30)
    first = decide(every(60), Policy(catchup="all"), T0, now, max_catchup=4, on_time=ON_TIME)
    assert first.send == minutes(1, 2, 3, 4)
    assert first.watermark == T0 + timedelta(minutes=4)
    assert first.next_fire_at == T0 + timedelta(minutes=5)  # already due: the next tick goes on
    second = decide(
        every(60), Policy(catchup="all"), first.watermark, now, max_catchup=4, on_time=ON_TIME
    )
    assert second.send == minutes(5, 6, 7, 8)


def test_starting_deadline_turns_old_fires_into_missed_ones() -> None:
    now = T0 + timedelta(minutes=5, seconds=10)
    decision = decide(
        every(60),
        Policy(catchup="all", starting_deadline=150),
        T0,
        now,
        max_catchup=100,
        on_time=ON_TIME,
    )
    assert decision.missed == minutes(1, 2)
    assert decision.send == minutes(3, 4, 5)


@settings(max_examples=200, deadline=None)
@given(
    interval=st.integers(min_value=1, max_value=3600),
    down=st.integers(min_value=0, max_value=5_000),
    max_catchup=st.integers(min_value=1, max_value=50),
)
def test_all_eventually_sends_every_fire_exactly_once(
    interval: int, down: int, max_catchup: int
) -> None:
    schedule = every(interval)
    now = T0 + timedelta(seconds=down)
    watermark, sent = T0, []
    for _ in range(down + 2):
        decision = decide(
            schedule,
            Policy(catchup="all"),
            watermark,
            now,
            max_catchup=max_catchup,
            on_time=ON_TIME,
        )
        assert len(decision.send) <= max_catchup
        sent.extend(decision.send)
        watermark = decision.watermark
        if decision.next_fire_at is None or decision.next_fire_at > now:
            break
    assert sent == list(schedule.fires_between(T0, now))


CRONS = st.sampled_from(
    [
        ("* * * * *", "UTC"),
        ("*/7 * * * *", "America/New_York"),
        ("30 2 * * *", "America/New_York"),
        ("0 * * * *", "Australia/Lord_Howe"),
        ("30 1 * * 0", "Europe/London"),
        ("0 0 29 2 *", "UTC"),
    ]
)


def _walked(schedule: Cron | Every, catchup: str, watermark: datetime, now: datetime) -> Decision:
    """The decision by walking every fire of the gap (what decide did before): the oracle."""
    fires = list(schedule.fires_between(watermark, now))
    if catchup == "latest":
        send = tuple(fires[-1:])
    else:
        send = tuple(f for f in fires if now - f <= ON_TIME)
    return Decision(send, (), len(fires) - len(send), max(watermark, now), None)


@settings(max_examples=150, deadline=None)
@given(
    expr=CRONS,
    catchup=st.sampled_from(["latest", "skip"]),
    start=st.datetimes(
        min_value=datetime(2024, 1, 1), max_value=datetime(2027, 12, 31), timezones=st.just(UTC)
    ),
    gap=st.integers(min_value=0, max_value=3 * 86400),
)
def test_latest_and_skip_decide_what_walking_every_fire_decides(
    expr: tuple[str, str], catchup: str, start: datetime, gap: int
) -> None:
    schedule = cron(*expr)
    now = start + timedelta(seconds=gap, microseconds=300_000)
    decision = decide(
        schedule, Policy(catchup=catchup), start, now, max_catchup=100, on_time=ON_TIME
    )
    expected = _walked(schedule, catchup, start, now)
    assert decision.send == expected.send
    if expected.skipped < SKIPPED_COUNT_LIMIT:
        assert (decision.skipped, decision.skipped_at_least) == (expected.skipped, False)
    else:
        assert (decision.skipped, decision.skipped_at_least) == (SKIPPED_COUNT_LIMIT, True)
    assert decision.watermark == max(start, now)


def test_a_year_of_downtime_costs_a_tick_no_more_than_a_minute_of_it() -> None:
    """20 schedules after 365 days down, decided under every policy but ``all`` (bounded by
    max_catchup): counts and times do not depend on the gap (a generous bound; the
    benchmark in benchmarks/catchup.py measures it)."""
    schedules = [cron("* * * * *"), every(1), cron("*/5 * * * *", "Europe/Berlin")] * 7
    watermark = T0 - timedelta(days=365)
    started = time.perf_counter()
    for schedule in schedules[:20]:
        for catchup in ("latest", "skip"):
            decision = decide(
                schedule, Policy(catchup=catchup), watermark, T0, max_catchup=100, on_time=ON_TIME
            )
            assert decision.skipped >= SKIPPED_COUNT_LIMIT - 1
            assert decision.watermark == T0
    assert time.perf_counter() - started < 5.0
    exact = decide(every(1), Policy(), watermark, T0, max_catchup=100, on_time=ON_TIME)
    assert exact.skipped == 365 * 86400 - 1  # every() counts by arithmetic
    assert exact.send == (T0,)


def test_a_clock_far_ahead_decides_at_once() -> None:
    far = datetime(9000, 1, 1, tzinfo=UTC)
    decision = decide(cron("* * * * *"), Policy(), T0, far, max_catchup=100, on_time=ON_TIME)
    assert decision.send == (far,)
    assert decision.watermark == far


@pytest.mark.parametrize("catchup", ["latest", "all", "skip"])
def test_deciding_ahead_takes_the_fires_up_to_the_horizon_and_lateness_from_now(
    catchup: str,
) -> None:
    # A Beat deciding half a second ahead: the fire at 12:01 is taken at 12:00:59.6, the
    # watermark moves to the horizon, and the next fire is the one after.
    now = T0 + timedelta(seconds=59.6)
    horizon = now + timedelta(seconds=0.5)
    decision = decide(
        every(60), Policy(catchup=catchup), T0, now, max_catchup=100, on_time=ON_TIME,
        horizon=horizon,
    )  # fmt: skip
    assert decision.send == minutes(1)
    assert decision.skipped == 0
    assert decision.watermark == horizon
    assert decision.next_fire_at == T0 + timedelta(minutes=2)
    # Without the horizon, nothing is due yet.
    assert (
        decide(every(60), Policy(catchup=catchup), T0, now, max_catchup=100, on_time=ON_TIME).send
        == ()
    )


def test_deciding_ahead_does_not_make_a_fire_older_than_it_is() -> None:
    # starting_deadline 150 s: the fire at 12:03 is 149.8 s old now (sent), 150.3 s old
    # at the horizon; its age counts from now.
    now = T0 + timedelta(minutes=5, seconds=29.8)
    decision = decide(
        every(60), Policy(catchup="all", starting_deadline=150), T0, now,
        max_catchup=100, on_time=ON_TIME, horizon=now + timedelta(seconds=0.5),
    )  # fmt: skip
    assert decision.missed == minutes(1, 2)
    assert decision.send == minutes(3, 4, 5)


def test_deciding_ahead_never_drops_a_due_fire_for_one_not_due_yet() -> None:
    # every(1), the fire at :01 decided 0.6 s late with a 0.5 s lead: under `latest` it
    # is still sent, with the fire at :02 (not due yet) after it; nothing is skipped.
    second = timedelta(seconds=1)
    now = T0 + timedelta(seconds=1.6)
    decision = decide(
        every(1), Policy(catchup="latest"), T0, now, max_catchup=100, on_time=ON_TIME,
        horizon=now + timedelta(seconds=0.5),
    )  # fmt: skip
    assert decision.send == (T0 + second, T0 + 2 * second)
    assert decision.skipped == 0
    # Three fires missed: the latest due one is sent, two skipped, the next one decided.
    late = T0 + timedelta(seconds=3.6)
    decision = decide(
        every(1), Policy(catchup="latest"), T0, late, max_catchup=100, on_time=ON_TIME,
        horizon=late + timedelta(seconds=0.5),
    )  # fmt: skip
    assert decision.send == (T0 + 3 * second, T0 + 4 * second)
    assert decision.skipped == 2
