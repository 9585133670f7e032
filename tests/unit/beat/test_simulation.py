"""Beat rehearsed on a virtual clock (``celery_gaffer.beat.simulation``), from frozen
inputs: no database, no clock."""

from __future__ import annotations

from datetime import date, datetime, timedelta, timezone

from celery_gaffer.beat.catchup import on_time_for
from celery_gaffer.beat.simulation import Fated, Outage, Subject, Timeline, simulate
from celery_gaffer.protocol import fire_key, jitter_delay
from celery_gaffer.schedules import cron, every
from celery_gaffer.schedules.bounds import Bounds
from celery_gaffer.schedules.calendars import CalendarRule
from celery_gaffer.schedules.spec import Policy

UTC = timezone.utc
T0 = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
ON_TIME = on_time_for(5.0)


def at(minutes: float) -> datetime:
    return T0 + timedelta(minutes=minutes)


def run(
    *subjects: Subject,
    start: datetime = T0,
    end: datetime = T0 + timedelta(hours=1),
    down: tuple[tuple[float, float], ...] = (),
    max_catchup: int = 100,
) -> list[Fated]:
    outages = [Outage(at(a), at(b)) for a, b in down]
    return simulate(subjects, start, end, outages, max_catchup=max_catchup, on_time=ON_TIME)


def fates(found: list[Fated]) -> list[tuple[float, str, float | None]]:
    """(minute, fate, minute sent) of each fire."""
    return [
        (
            (f.nominal_at - T0).total_seconds() / 60,
            f.fate,
            None if f.sent_at is None else (f.sent_at - T0).total_seconds() / 60,
        )
        for f in found
    ]


def ten_minutes(catchup: str, **policy: object) -> Subject:
    # Its watermark just before 12:00: the fire of 12:00 is to come.
    policy_ = Policy(catchup=catchup, **policy)  # type: ignore[arg-type]
    return Subject("s", every(600), policy_, T0 - timedelta(seconds=1))


def test_is_ten_seconds_for_the_default_max_interval_and_twice_a_longer_one() -> None:
    assert on_time_for(5.0) == timedelta(seconds=10)
    assert on_time_for(30) == timedelta(seconds=60)


def test_an_up_beat_sends_every_fire_at_its_time_the_one_at_from_included() -> None:
    found = run(ten_minutes("all"), start=T0, end=at(30))
    assert fates(found) == [(0, "on_time", 0), (10, "on_time", 10), (20, "on_time", 20),
                            (30, "on_time", 30)]  # fmt: skip
    assert found[0].to_json() == {
        "schedule": "s",
        "nominal_at": "2026-06-01T12:00:00+00:00",
        "fate": "on_time",
        "sent_at": "2026-06-01T12:00:00+00:00",
        "reason": "",
    }


def test_an_outage_is_caught_up_by_each_policy_when_beat_starts_again() -> None:
    # Down after 12:05 until 12:35: the fires of 12:10, 12:20 and 12:30 fell in it.
    down = ((5, 35),)
    assert fates(run(ten_minutes("all"), end=at(40), down=down)) == [
        (0, "on_time", 0), (10, "late", 35), (20, "late", 35), (30, "late", 35),
        (40, "on_time", 40),
    ]  # fmt: skip
    assert fates(run(ten_minutes("latest"), end=at(40), down=down)) == [
        (0, "on_time", 0), (10, "skipped", None), (20, "skipped", None), (30, "late", 35),
        (40, "on_time", 40),
    ]  # fmt: skip
    assert fates(run(ten_minutes("skip"), end=at(40), down=down)) == [
        (0, "on_time", 0), (10, "skipped", None), (20, "skipped", None),
        (30, "skipped", None), (40, "on_time", 40),
    ]  # fmt: skip
    late = run(ten_minutes("all"), end=at(40), down=down)[1]
    assert late.reason == "Beat was down: sent 25m late by catch-up (catchup 'all')"


def test_a_fire_at_an_outages_start_is_sent_and_one_at_its_end_is_on_time() -> None:
    assert fates(run(ten_minutes("skip"), end=at(20), down=((10, 20),))) == [
        (0, "on_time", 0), (10, "on_time", 10), (20, "on_time", 20),
    ]  # fmt: skip


def test_the_starting_deadline_misses_the_fires_too_old_with_beats_reason() -> None:
    found = run(ten_minutes("all", starting_deadline=900), end=at(40), down=((5, 35),))
    assert fates(found) == [
        (0, "on_time", 0), (10, "missed", None), (20, "late", 35), (30, "late", 35),
        (40, "on_time", 40),
    ]  # fmt: skip
    assert found[1].reason == (
        "never sent: Beat reached it 1500s late, past its starting deadline of 900s"
    )


def test_max_catchup_leaves_a_backlog_that_the_next_ticks_send_at_the_same_instant() -> None:
    found = run(ten_minutes("all"), end=at(60), down=((5, 55),), max_catchup=2)
    assert [f for f in fates(found) if f[1] == "late"] == [
        (10, "late", 55), (20, "late", 55), (30, "late", 55), (40, "late", 55),
        (50, "late", 55),
    ]  # fmt: skip


def test_max_runs_counts_the_fires_sent_before_the_window_and_ends_the_schedule() -> None:
    bounded = Policy(catchup="all", bounds=Bounds(max_runs=5))
    # Stored watermark 11:00, so a Beat running until 12:00 sent 11:10 ... 11:50 first:
    # 5 fires: its last.
    early = Subject("s", every(600), bounded, T0 - timedelta(hours=1))
    assert run(early, end=at(30)) == []
    late = Subject("s", every(600), bounded, T0 - timedelta(minutes=25), fired_count=1)
    # 11:40 and 11:50 sent before 12:00, then 12:00: one run left, that a catch-up
    # takes, leaving the next fire out.
    found = run(late, end=at(30), down=((5, 25),))
    assert fates(found) == [(0, "on_time", 0), (10, "late", 25), (20, "skipped", None)]
    assert found[2].reason == "max_runs (5) reached: the schedule is done"


def test_a_jittered_fire_is_sent_at_its_own_time_or_when_beat_starts_again() -> None:
    jittered = Subject(
        "j", every(600, jitter=300), Policy(catchup="all"), T0 - timedelta(seconds=1)
    )
    delay = timedelta(seconds=jitter_delay(fire_key("j", at(10)), 300))
    found = run(jittered, end=at(10))
    assert found[1].sent_at == at(10) + delay
    assert found[1].fate == "on_time"
    assert found[1].reason.startswith("jitter: sent ")
    # Down just after 12:10: decided then, its send time falls in the outage.
    outage = run(jittered, end=at(10), down=((10, 20),))
    assert (outage[1].fate, outage[1].sent_at) == ("late", at(20))


def test_dst_a_berlin_0230_fire_in_the_gap_is_sent_at_0300_cest_or_when_beat_starts() -> None:
    berlin = Subject("n", cron("30 2 * * *", "Europe/Berlin"), Policy(catchup="all"), T0)
    start, end = datetime(2027, 3, 27, 12, tzinfo=UTC), datetime(2027, 3, 29, 12, tzinfo=UTC)
    assert [(f.nominal_at, f.fate) for f in simulate([berlin], start, end, [], max_catchup=100,
                                                     on_time=ON_TIME)] == [
        (datetime(2027, 3, 28, 1, tzinfo=UTC), "on_time"),  # 03:00 CEST
        (datetime(2027, 3, 29, 0, 30, tzinfo=UTC), "on_time"),  # 02:30 CEST
    ]  # fmt: skip
    outage = Outage(datetime(2027, 3, 28, 0, tzinfo=UTC), datetime(2027, 3, 28, 2, tzinfo=UTC))
    found = simulate([berlin], start, end, [outage], max_catchup=100, on_time=ON_TIME)
    assert (found[0].fate, found[0].sent_at, found[0].zone) == ("late", outage.end, "Europe/Berlin")


def test_a_calendar_skips_or_moves_fires_with_its_reason() -> None:
    weekends = CalendarRule(("weekends",), "skip")
    daily = Subject("d", every(86400), Policy(bounds=Bounds(calendar=weekends)), T0)
    # 2026-06-05 is a Friday.
    start, end = datetime(2026, 6, 5, tzinfo=UTC), datetime(2026, 6, 8, tzinfo=UTC)
    found = simulate([daily], start, end, [], max_catchup=100, on_time=ON_TIME)
    assert [(f.nominal_at.day, f.fate) for f in found] == [
        (5, "on_time"), (6, "calendar_skipped"), (7, "calendar_skipped"), (8, "on_time"),
    ]  # fmt: skip
    assert found[1].reason == "2026-06-06: Saturday, weekends → skipped"
    moving = CalendarRule(("weekends",), "next_day")
    saturdays = Subject("m", cron("0 9 * * 6"), Policy(bounds=Bounds(calendar=moving)), T0)
    moved = simulate([saturdays], start, end + timedelta(days=1), [], max_catchup=100,
                     on_time=ON_TIME)  # fmt: skip
    assert [(f.nominal_at, f.fate) for f in moved] == [
        (datetime(2026, 6, 8, 9, tzinfo=UTC), "moved")
    ]
    assert moved[0].reason == "2026-06-06: Saturday, weekends → moved to 2026-06-08"


def test_a_stored_calendar_is_resolved_as_beat_loads_it() -> None:
    rule = CalendarRule(("freeze",), "skip")
    subject = Subject(
        "d", every(86400), Policy(bounds=Bounds(calendar=rule)), T0 - timedelta(hours=1)
    )
    loaded = subject.with_stored_calendars(lambda: {"freeze": frozenset({date(2026, 6, 2)})})
    found = run(loaded, end=at(60 * 36))  # every day at 00:00Z
    assert [(f.nominal_at.day, f.fate) for f in found] == [(2, "calendar_skipped"), (3, "on_time")]
    assert found[0].reason == "2026-06-02: in freeze → skipped"
    assert run(subject, end=at(60 * 13))[0].fate == "on_time"  # not loaded: no date


def test_a_paused_schedule_fires_only_once_its_pause_ends() -> None:
    paused = Policy(catchup="all", enabled=False)
    forever = Subject("p", every(600), paused, T0)
    assert run(forever) == []
    until = Subject("p", every(600), paused, T0, paused_until=at(25))
    assert fates(run(until, end=at(40))) == [(30, "on_time", 30), (40, "on_time", 40)]
    # Beat down when the pause ends: resumed when it starts again, from then.
    assert fates(run(until, end=at(40), down=((20, 35),))) == [(40, "on_time", 40)]


def test_the_timeline_merges_overlapping_outages() -> None:
    timeline = Timeline([Outage(at(30), at(50)), Outage(at(10), at(40)), Outage(at(60), at(70))])
    assert timeline.outages == (Outage(at(10), at(50)), Outage(at(60), at(70)))
    assert timeline.up_at(at(10)) == at(10)
    assert timeline.up_at(at(45)) == at(50)
    assert timeline.up_at(at(55)) == at(55)
