"""The tick's wake planner: when a run next wakes and how far ahead fires are decided,
computed from the times given (no clock read, no I/O)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from celery_gaffer.beat.wake import DECIDE_AHEAD, WakePlanner, nap, until_database_work

NOW = datetime(2026, 6, 1, 12, 0, tzinfo=timezone.utc)
MONOTONIC = 1000.0


def delay(**overrides: object) -> float:
    facts: dict[str, object] = {
        "now": NOW,
        "monotonic": MONOTONIC,
        "max_interval": 5.0,
        "wake_at": None,
        "alerts_in": None,
        "sweep_at": MONOTONIC + 100,
        "lease_ttl": 300.0,
    }
    facts.update(overrides)
    return until_database_work(**facts)  # type: ignore[arg-type]


def test_with_nothing_due_a_run_sleeps_max_interval() -> None:
    assert delay() == 5.0


def test_the_first_of_database_work_alerts_sweep_and_lease_renewal_wakes_the_run() -> None:
    assert delay(wake_at=NOW + timedelta(seconds=2)) == 2.0
    assert delay(wake_at=NOW + timedelta(seconds=2), alerts_in=1.5) == 1.5
    assert delay(sweep_at=MONOTONIC + 0.75) == 0.75
    assert delay(lease_ttl=3.0) == 1.0  # a third of the lease TTL


def test_work_already_due_wakes_at_once_never_in_the_past() -> None:
    assert delay(wake_at=NOW - timedelta(seconds=30)) == 0.0
    assert delay(sweep_at=MONOTONIC - 1) == 0.0


def test_a_held_send_sooner_shortens_the_nap_and_nothing_makes_it_negative() -> None:
    assert nap(2.0, None) == 2.0
    assert nap(2.0, 0.3) == 0.3
    assert nap(2.0, 3.0) == 2.0
    assert nap(2.0, -1.0) == 0.0


def test_a_run_woken_for_a_held_send_waits_for_the_database_work_by_either_clock() -> None:
    planner = WakePlanner()
    assert planner.database_wait(NOW, MONOTONIC) is None
    # The database work is due in 4 s, a held send in 1 s: sleep 1 s, remember the 4.
    assert planner.sleep(4.0, 1.0, NOW, MONOTONIC) == 1.0
    later = NOW + timedelta(seconds=1)
    assert planner.database_wait(later, MONOTONIC + 1) == pytest.approx(3.0)
    # A clock stepped back an hour does not hold it up: the monotonic time still passes.
    stepped_back = NOW - timedelta(hours=1)
    assert planner.database_wait(stepped_back, MONOTONIC + 4) is None
    assert planner.database_wait(stepped_back, MONOTONIC + 4) is None  # forgotten


def test_a_clock_stepped_forward_ends_the_wait_too() -> None:
    planner = WakePlanner()
    planner.sleep(4.0, 1.0, NOW, MONOTONIC)
    assert planner.database_wait(NOW + timedelta(seconds=5), MONOTONIC + 1) is None


def test_a_full_sleep_leaves_the_next_run_to_do_the_database_work() -> None:
    planner = WakePlanner()
    assert planner.sleep(4.0, None, NOW, MONOTONIC) == 4.0
    assert planner.sleep(4.0, 9.0, NOW, MONOTONIC) == 4.0
    assert planner.database_wait(NOW, MONOTONIC) is None


def test_the_lead_is_twice_the_last_batch_decaying_and_bounded() -> None:
    planner = WakePlanner()
    assert planner.ahead == timedelta(0)
    planner.batch_took(0.1)
    assert planner.lead == pytest.approx(0.2)
    planner.batch_took(0.01)  # a quick batch: the lead decays rather than drops
    assert planner.lead == pytest.approx(0.18)
    planner.batch_took(10.0)
    assert planner.lead == DECIDE_AHEAD
    assert planner.ahead == timedelta(seconds=DECIDE_AHEAD)
