"""Schedules compare and hash by their ``to_dict()``, the key made once per object."""

from __future__ import annotations

import pickle
from datetime import datetime, timedelta, timezone

from celery_gaffer import at, cron, every
from celery_gaffer.schedules.kinds import schedule_from_dict


def test_equal_schedules_hash_equal_before_and_after_caching() -> None:
    pairs = [
        (cron("0 3 * * *", "Europe/Paris"), cron("0  3 * * *", "Europe/Paris")),
        (every(60), every(timedelta(minutes=1))),
        (
            at(datetime(2030, 1, 1, tzinfo=timezone.utc)),
            at(datetime(2030, 1, 1, tzinfo=timezone.utc)),
        ),
    ]
    for one, other in pairs:
        first = hash(one)  # cached on ``one`` only
        assert one == other
        assert other == one
        assert hash(one) == first == hash(other)
        assert hash(one) == hash(tuple(sorted(one.to_dict().items())))
        copied = pickle.loads(pickle.dumps(one))
        assert copied == one
        assert hash(copied) == first
        assert schedule_from_dict(one.to_dict()) == one


def test_different_schedules_differ() -> None:
    schedules = [
        cron("0 3 * * *"),
        cron("0 3 * * *", "Europe/Paris"),
        cron("0 3 * * *", jitter=5),
        every(60),
        every(60, jitter=5),
        every(61),
        at(datetime(2030, 1, 1, tzinfo=timezone.utc)),
    ]
    for i, one in enumerate(schedules):
        hash(one)
        for j, other in enumerate(schedules):
            assert (one == other) == (i == j)
    assert len(set(schedules)) == len(schedules)
    assert {every(60): 1}[every(60)] == 1
    assert cron("0 3 * * *") != "0 3 * * *"
