"""Beat's own moves of a schedule into ``error`` and out of it are in the audit log,
written with the move: actor and source ``beat``, the reason as the note."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from celery import Celery
from kombu import compression

from celery_gaffer import Scheduler, ScheduleStore, every
from celery_gaffer.beat.rows import ERROR_RECHECK
from celery_gaffer.store import database_for
from celery_gaffer.store.audit import AuditEntry, entries

from ...support import FrozenClock, message_headers, noop_app


def _broken(body: bytes) -> bytes:
    raise KeyError("tenant-dictionary")  # its own lookup fails, for every message


compression.register(_broken, _broken, "application/x-gaffer-broken", ["broken"])


@pytest.fixture
def app(database_url: str, redis_url: str) -> Iterator[Celery]:
    with noop_app("error-audit-test", database_url, redis_url) as app:
        yield app


def beat_entries(app: Celery, schedule: str) -> list[AuditEntry]:
    database = database_for(app)
    with database.read() as conn:
        found = entries(conn, database.models, schedule=schedule)
    return [entry for entry in found if entry.source == "beat"]


def test_a_move_to_error_and_its_recovery_are_audited_once_each(
    app: Celery, clock: FrozenClock
) -> None:
    store = ScheduleStore(app, clock=clock, check_tasks=False)
    store.add("later", "t.later", every(60))  # the task is not registered (yet)
    scheduler = Scheduler(app, clock=clock)
    clock.advance(60)
    scheduler.tick()
    error = store.get("later").error
    assert error is not None
    assert "'t.later' is not registered" in error
    [moved] = beat_entries(app, "later")
    assert (moved.actor, moved.source, moved.action) == ("beat", "beat", "error")
    assert moved.note == error
    assert moved.changes == {"error": [None, error]}
    assert moved.at == clock.now

    clock.advance(ERROR_RECHECK.total_seconds())
    scheduler.tick()  # loaded again, still in error for the same reason: no new entry
    assert len(beat_entries(app, "later")) == 1

    @app.task(name="t.later", shared=False)
    def later() -> None:
        return None

    clock.advance(ERROR_RECHECK.total_seconds())
    scheduler.tick()  # usable now: the error clears
    assert store.get("later").error is None
    recovered, first = beat_entries(app, "later")  # newest first
    assert first == moved
    assert (recovered.actor, recovered.source, recovered.action) == ("beat", "beat", "recover")
    assert recovered.note is None
    assert recovered.changes == {"error": [error, None]}
    assert recovered.at == clock.now


def test_a_schedule_edited_in_error_and_still_unusable_moves_to_error_again(
    app: Celery, clock: FrozenClock
) -> None:
    store = ScheduleStore(app, clock=clock, check_tasks=False)
    store.add("moving", "t.first", every(60))
    scheduler = Scheduler(app, clock=clock)
    clock.advance(60)
    scheduler.tick()
    first = store.get("moving").error
    store.update("moving", task="t.second")  # the edit clears the error; still unusable
    assert store.get("moving").error is None
    clock.advance(60)
    scheduler.tick()
    second = store.get("moving").error
    assert second is not None
    assert "t.second" in second
    assert first != second
    changed, moved = beat_entries(app, "moving")
    assert moved.changes == {"error": [None, first]}
    assert (changed.action, changed.note) == ("error", second)
    assert changed.changes == {"error": [None, second]}


def test_a_payload_the_broker_refuses_is_audited_once_as_a_move_to_error(
    app: Celery, clock: FrozenClock, redis_url: str
) -> None:
    store = ScheduleStore(app, clock=clock)
    store.add("fine", "t.noop", every(60))
    store.add("cursed", "t.noop", every(60), options={"compression": "broken"})
    scheduler = Scheduler(app, clock=clock)
    for _ in range(3):
        clock.advance(60)
        scheduler.tick()
    assert [h["gaffer_schedule"] for h in message_headers(redis_url)] == ["fine"] * 3
    error = store.get("cursed").error
    assert error is not None
    assert "tenant-dictionary" in error
    [moved] = beat_entries(app, "cursed")
    assert (moved.actor, moved.action, moved.note) == ("beat", "error", error)
    assert moved.changes == {"error": [None, error]}
    assert beat_entries(app, "fine") == []
