"""The watermark rules: where a schedule's firing resumes from when it is added, replaced,
edited, paused or resumed (pure: no database). A tick's own decision (``catchup.decide``)
is used to show what each start means: which fires the next tick sends."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from hypothesis import given
from hypothesis import strategies as st

from celery_gaffer.beat.catchup import decide
from celery_gaffer.protocol import Catchup
from celery_gaffer.schedules import at, cron, every
from celery_gaffer.schedules.bounds import Bounds
from celery_gaffer.schedules.kinds import Schedule
from celery_gaffer.schedules.spec import Policy, ScheduleSpec
from celery_gaffer.schedules.watermarks import (
    Standing,
    Start,
    added,
    done,
    edited,
    first_fire,
    kept,
    new_watermark,
    next_fire,
    resumed,
    stays_paused,
)
from celery_gaffer.store.schedule_rows import StoredSchedule, columns

UTC = timezone.utc
T0 = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
MINUTE = timedelta(minutes=1)
ONE_SECOND = timedelta(seconds=1)
EVERY_MINUTE = every(60)

instants = st.integers(min_value=-10_000, max_value=10_000).map(
    lambda seconds: T0 + timedelta(seconds=seconds)
)
policies = st.sampled_from(list(Catchup))


def spec_of(
    schedule: Schedule = EVERY_MINUTE,
    *,
    enabled: bool = True,
    bounds: Bounds | None = None,
    catchup: Catchup = Catchup.ALL,
) -> ScheduleSpec:
    policy = Policy(catchup=catchup, enabled=enabled, bounds=bounds or Bounds())
    return ScheduleSpec(name="report", task="tasks.report", schedule=schedule, policy=policy)


def standing(
    schedule: Schedule | None = EVERY_MINUTE,
    *,
    watermark: datetime = T0,
    fired: int = 0,
    enabled: bool = True,
    bounds: Bounds | None = None,
    catchup: Catchup = Catchup.ALL,
    error: str | None = None,
) -> Standing:
    policy = Policy(catchup=catchup, enabled=enabled, bounds=bounds or Bounds())
    return Standing(schedule, policy, watermark, fired, error)


def sent_at(spec: ScheduleSpec, start: Start, now: datetime) -> tuple[datetime, ...]:
    """What a tick at ``now`` sends for ``spec`` starting at ``start``."""
    window = spec.policy.bounds.window(
        spec.schedule, fired=start.fired_count, watermark=start.watermark_at
    )
    return decide(
        window,
        spec.policy,
        start.watermark_at,
        now,
        max_catchup=1000,
        on_time=timedelta(seconds=10),
        runs_left=spec.policy.bounds.runs_left(start.fired_count),
    ).send


# -- add ----------------------------------------------------------------------------


def test_an_added_schedule_starts_from_now_with_no_fire_sent() -> None:
    start = added(spec_of(), T0 + 30 * ONE_SECOND)
    assert start == Start(T0 + 30 * ONE_SECOND, 0)
    assert next_fire(spec_of(), start) == T0 + MINUTE


def test_an_added_schedule_keeps_a_given_watermark_as_is() -> None:
    start = added(spec_of(), T0, watermark_at=T0 - 5 * MINUTE)
    assert start == Start(T0 - 5 * MINUTE, 0)
    # the catch-up policy then decides about the fires since
    assert sent_at(spec_of(), start, T0) == tuple(T0 - n * MINUTE for n in range(4, -1, -1))


def test_a_one_off_in_the_past_starts_just_before_its_time_so_that_catchup_decides() -> None:
    one_off = spec_of(at(T0 - 10 * MINUTE))
    start = added(one_off, T0)
    assert start.watermark_at == T0 - 10 * MINUTE - ONE_SECOND
    assert next_fire(one_off, start) == T0 - 10 * MINUTE
    assert sent_at(one_off, start, T0) == (T0 - 10 * MINUTE,)
    skipping = spec_of(at(T0 - 10 * MINUTE), catchup=Catchup.SKIP)
    assert sent_at(skipping, added(skipping, T0), T0) == ()


def test_a_one_off_at_now_also_starts_just_before_it_and_a_future_one_from_now() -> None:
    assert new_watermark(spec_of(at(T0)), T0) == T0 - ONE_SECOND
    assert new_watermark(spec_of(at(T0 + MINUTE)), T0) == T0


@given(when=instants, now=instants)
def test_an_added_one_off_always_has_its_time_as_next_fire(when: datetime, now: datetime) -> None:
    one_off = spec_of(at(when))
    start = added(one_off, now)
    assert start.fired_count == 0
    assert start.watermark_at <= now
    assert next_fire(one_off, start) == when


@given(now=instants)
def test_an_added_repeating_schedule_never_has_a_backlog(now: datetime) -> None:
    spec = spec_of()
    start = added(spec, now)
    assert start.watermark_at == now
    assert sent_at(spec, start, now) == ()


# -- next fire and done ---------------------------------------------------------------


def test_a_paused_schedule_has_no_next_fire() -> None:
    assert next_fire(spec_of(enabled=False), Start(T0)) is None
    assert first_fire(EVERY_MINUTE, Bounds(), T0, 0) == T0 + MINUTE  # it would have one


def test_the_next_fire_is_within_the_bounds() -> None:
    late_start = Bounds(start_at=T0 + 10 * MINUTE)
    assert next_fire(spec_of(bounds=late_start), Start(T0)) == T0 + 10 * MINUTE
    assert next_fire(spec_of(bounds=Bounds(end_at=T0)), Start(T0)) is None
    assert next_fire(spec_of(bounds=Bounds(max_runs=3)), Start(T0, 3)) is None
    assert next_fire(spec_of(bounds=Bounds(max_runs=3)), Start(T0, 2)) == T0 + MINUTE


def test_a_schedule_is_done_when_its_bounds_leave_no_fire_after_its_watermark() -> None:
    assert done(standing(bounds=Bounds(max_runs=3), fired=3))
    assert not done(standing(bounds=Bounds(max_runs=3), fired=2))
    assert done(standing(at(T0), watermark=T0))
    assert not done(standing(at(T0), watermark=T0 - ONE_SECOND))
    assert done(standing(bounds=Bounds(end_at=T0)))
    assert not done(standing())  # unbounded: never done


def test_a_paused_erroneous_or_unreadable_schedule_is_not_done() -> None:
    finished = Bounds(max_runs=1)
    assert not done(standing(bounds=finished, fired=1, enabled=False))
    assert not done(standing(bounds=finished, fired=1, error="task: unknown"))
    assert not done(standing(None, error="schedule: unreadable"))


# -- replace (add with replace=True, a changed beat_schedule entry) ---------------------


def test_a_replacement_keeps_the_backlog_and_the_fired_count() -> None:
    current = standing(watermark=T0 - 5 * MINUTE, fired=7)
    spec = spec_of(cron("* * * * *"))
    assert kept(current, spec, T0) == Start(T0 - 5 * MINUTE, 7)
    assert len(sent_at(spec, kept(current, spec, T0), T0)) == 5


def test_a_replacement_by_another_one_off_starts_as_a_new_one() -> None:
    current = standing(at(T0 - 3 * MINUTE), watermark=T0 - 10 * MINUTE, fired=1)
    one_off = spec_of(at(T0 - MINUTE))
    assert kept(current, one_off, T0) == Start(T0 - MINUTE - ONE_SECOND, 1)
    later = spec_of(at(T0 + MINUTE))
    assert kept(current, later, T0) == Start(T0, 1)


def test_the_same_one_off_keeps_its_watermark() -> None:
    current = standing(at(T0 - MINUTE), watermark=T0 - MINUTE - ONE_SECOND)
    assert kept(current, spec_of(at(T0 - MINUTE)), T0).watermark_at == T0 - MINUTE - ONE_SECOND


def test_a_done_schedule_replaced_starts_from_now_so_loosened_bounds_send_no_backlog() -> None:
    current = standing(watermark=T0 - 30 * MINUTE, fired=3, bounds=Bounds(max_runs=3))
    looser = spec_of(bounds=Bounds(max_runs=10))
    start = kept(current, looser, T0)
    assert start == Start(T0, 3)
    assert sent_at(looser, start, T0) == ()
    assert next_fire(looser, start) == T0 + MINUTE


def test_a_paused_schedule_enabled_by_its_replacement_starts_from_now() -> None:
    current = standing(watermark=T0 - 30 * MINUTE, enabled=False)
    assert kept(current, spec_of(), T0) == Start(T0, 0)
    # one that stays paused keeps its watermark
    assert kept(current, spec_of(enabled=False), T0) == Start(T0 - 30 * MINUTE, 0)


def test_configuration_never_resumes_a_schedule_paused_by_hand() -> None:
    assert stays_paused(standing(enabled=False))
    assert not stays_paused(standing(enabled=True))


def test_a_replacement_never_moves_a_watermark_back() -> None:
    ahead = standing(watermark=T0 + 5 * MINUTE, bounds=Bounds(end_at=T0), fired=2)
    assert kept(ahead, spec_of(), T0) == Start(T0 + 5 * MINUTE, 2)


def test_the_store_rows_read_the_same_rules() -> None:
    row = StoredSchedule(
        name="report",
        task="tasks.report",
        schedule=EVERY_MINUTE,
        args=[],
        kwargs={},
        options={},
        policy=Policy(bounds=Bounds(max_runs=2)),
        source="db",
        watermark_at=T0 - 30 * MINUTE,
        next_fire_at=None,
        error=None,
        updated_at=T0,
        fired_count=2,
    )
    assert row.standing == standing(
        watermark=T0 - 30 * MINUTE, fired=2, bounds=Bounds(max_runs=2), catchup=Catchup.LATEST
    )
    assert row.finished
    assert kept(row.standing, spec_of(), T0).watermark_at == T0
    values = columns(spec_of(), T0 - MINUTE, T0, 4)
    assert (values["watermark_at"], values["next_fire_at"]) == (T0 - MINUTE, T0)
    paused = columns(spec_of(enabled=False), T0 - MINUTE, T0, 4)
    assert (paused["next_fire_at"], paused["check_at"]) == (None, None)


# -- edit (update) --------------------------------------------------------------------


@given(watermark=instants, now=instants, fired=st.integers(0, 100), catchup=policies)
def test_an_edit_that_keeps_the_timing_keeps_the_backlog(
    watermark: datetime, now: datetime, fired: int, catchup: Catchup
) -> None:
    current = standing(watermark=watermark, fired=fired, catchup=catchup)
    renamed_task = spec_of(catchup=catchup)
    assert edited(current, renamed_task, now, new_timing=False) == Start(watermark, fired)


def test_an_edit_that_keeps_the_timing_sends_the_backlog_on_the_next_tick() -> None:
    current = standing(watermark=T0 - 3 * MINUTE)
    start = edited(current, spec_of(), T0, new_timing=False)
    assert sent_at(spec_of(), start, T0) == (T0 - 2 * MINUTE, T0 - MINUTE, T0)


@given(watermark=instants, now=instants, fired=st.integers(0, 100))
def test_a_new_timing_starts_from_now_and_sends_no_fire_before_the_edit(
    watermark: datetime, now: datetime, fired: int
) -> None:
    current = standing(watermark=watermark, fired=fired)
    hourly = spec_of(cron("0 * * * *"))
    start = edited(current, hourly, now, new_timing=True)
    assert start == Start(max(watermark, now), fired)
    assert sent_at(hourly, start, now) == ()


def test_a_new_one_off_timing_starts_as_a_new_one_off_does() -> None:
    current = standing(watermark=T0 - 30 * MINUTE, fired=4)
    one_off = spec_of(at(T0 - 10 * MINUTE))
    start = edited(current, one_off, T0, new_timing=True)
    assert start == Start(T0 - 10 * MINUTE - ONE_SECOND, 4)
    assert sent_at(one_off, start, T0) == (T0 - 10 * MINUTE,)


def test_editing_a_done_schedule_without_a_new_timing_starts_from_now() -> None:
    current = standing(watermark=T0 - 30 * MINUTE, fired=1, bounds=Bounds(max_runs=1))
    start = edited(current, spec_of(bounds=Bounds(max_runs=5)), T0, new_timing=False)
    assert start == Start(T0, 1)


# -- pause and resume ------------------------------------------------------------------


@given(watermark=instants, now=instants, fired=st.integers(0, 100), catchup=policies)
def test_resume_drops_the_fires_of_the_pause_whatever_the_catchup_policy(
    watermark: datetime, now: datetime, fired: int, catchup: Catchup
) -> None:
    current = standing(watermark=watermark, fired=fired, enabled=False, catchup=catchup)
    start = resumed(current, now)
    assert start == Start(max(watermark, now), fired)
    assert sent_at(spec_of(catchup=catchup), start, now) == ()


def test_a_resumed_schedule_fires_next_at_its_first_time_after_now() -> None:
    current = standing(watermark=T0 - 90 * MINUTE, enabled=False)
    start = resumed(current, T0 + 30 * ONE_SECOND)
    assert first_fire(EVERY_MINUTE, Bounds(), start.watermark_at, start.fired_count) == (
        T0 + MINUTE
    )


def test_a_paused_schedule_keeps_its_backlog_until_resumed_then_drops_it() -> None:
    # Paused at T0 - 10 minutes: while paused nothing is decided (no next fire)...
    current = standing(watermark=T0 - 10 * MINUTE, enabled=False)
    assert next_fire(spec_of(enabled=False), Start(current.watermark_at)) is None
    # ...and a resume at T0 sends none of the ten fires that fell meanwhile.
    assert sent_at(spec_of(), resumed(current, T0), T0) == ()
    # Had it not been paused, catch-up "all" would have sent them.
    assert len(sent_at(spec_of(), Start(current.watermark_at), T0)) == 10
