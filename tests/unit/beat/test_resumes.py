"""Beat looks for ended pauses at most every few seconds of its clock, and logs each
schedule it resumed."""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

import pytest

from celery_gaffer.beat.resumes import RESUME_EVERY, Resumes

from ...support import FrozenClock


def test_the_tick_looks_at_most_every_few_seconds_of_its_clock(clock: FrozenClock) -> None:
    looks: list[datetime] = []

    def resume_due(now: datetime) -> list[str]:
        looks.append(now)
        return []

    resumes = Resumes(resume_due, clock)
    start = clock.now
    resumes.on_tick(clock.now)
    resumes.on_tick(clock.advance(RESUME_EVERY - 0.5))
    resumes.on_tick(clock.advance(0.5))
    resumes.on_tick(clock.advance(1))
    assert looks == [start, start + timedelta(seconds=RESUME_EVERY)]
    resumes.on_tick(clock.advance(-60))  # a clock set back looks again
    assert len(looks) == 3


def test_each_resumed_schedule_is_logged_once(
    clock: FrozenClock, caplog: pytest.LogCaptureFixture
) -> None:
    resumes = Resumes(lambda now: ["a", "b"], clock)
    with caplog.at_level(logging.INFO, logger="celery_gaffer.beat"):
        assert resumes.resume(clock.now) == ["a", "b"]
    lines = [(r.getMessage(), getattr(r, "action", None)) for r in caplog.records]
    assert lines == [
        ("resumed schedule a: its pause ended", "pause_ended"),
        ("resumed schedule b: its pause ended", "pause_ended"),
    ]
