"""Probe: a lead makes fires due (and Beat wake) that long before their time, and only
fires: health checks, publishes and confirmations keep their own times."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from celery_gaffer.store.schedules import Probe

T0 = datetime(2026, 6, 1, 12, 0, tzinfo=timezone.utc)
LEAD = timedelta(milliseconds=500)


def test_a_lead_brings_fires_forward_and_nothing_else() -> None:
    later = T0 + timedelta(seconds=0.3)
    probe = Probe(next_fire_at=later, check_at=later, publish_after=later, confirm_after=later)
    assert probe.due(T0) == (False, False, False, False)
    assert probe.due(T0, LEAD) == (True, False, False, False)
    assert probe.earliest() == later
    assert probe.earliest(LEAD) == later - LEAD


def test_a_lead_with_nothing_scheduled_wakes_for_the_rest() -> None:
    check = T0 + timedelta(seconds=2)
    probe = Probe(next_fire_at=None, check_at=check, publish_after=None, confirm_after=None)
    assert probe.due(T0 + timedelta(seconds=1.9), LEAD) == (False, False, False, False)
    assert probe.earliest(LEAD) == check
