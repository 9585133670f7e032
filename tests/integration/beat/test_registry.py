"""The Beats' registry from Beat's side: written at the first tick, refreshed at most every
few seconds of the injected clock, removed on close; dead Beats' rows pruned."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import datetime, timedelta

import pytest
from celery import Celery

from celery_gaffer import Scheduler
from celery_gaffer.beat.registry import FORGET_AFTER, PRUNE_EVERY, REFRESH_EVERY, beat_name
from celery_gaffer.store import database_for
from celery_gaffer.store.beats import BeatInfo, beats, heartbeat

from ...support import FrozenClock, noop_app


@pytest.fixture
def app(database_url: str) -> Iterator[Celery]:
    with noop_app("registry-test", database_url) as app:
        yield app


def registered(app: Celery) -> list[BeatInfo]:
    database = database_for(app)
    with database.read() as conn:
        return beats(conn, database.models)


def add_other_beat(app: Celery, name: str, last_tick_at: datetime) -> None:
    database = database_for(app)
    with database.begin() as conn:
        heartbeat(
            conn,
            database.models,
            name=name,
            host="elsewhere",
            pid=1,
            started_at=last_tick_at,
            now=last_tick_at,
        )


def test_a_beat_registers_at_its_first_tick_and_refreshes_at_most_every_few_seconds(
    app: Celery, clock: FrozenClock
) -> None:
    scheduler = Scheduler(app, clock=clock)
    assert registered(app) == []  # nothing before the first tick
    started = clock.now
    scheduler.tick()
    [row] = registered(app)
    name, host, pid = beat_name()
    assert (row.name, row.host, row.pid) == (name, host, pid)
    assert row.started_at == row.last_tick_at == started

    clock.advance(REFRESH_EVERY - 1)
    scheduler.tick()
    assert registered(app)[0].last_tick_at == started  # not written again so soon

    clock.advance(1)
    scheduler.tick()
    [row] = registered(app)
    assert row.last_tick_at == clock.now
    assert row.started_at == started

    scheduler.close()
    assert registered(app) == []


def test_the_rows_of_beats_that_stopped_ticking_long_ago_are_removed(
    app: Celery, clock: FrozenClock
) -> None:
    add_other_beat(app, "dead:1", clock.now - FORGET_AFTER - timedelta(seconds=1))
    add_other_beat(app, "quiet:2", clock.now - FORGET_AFTER + timedelta(minutes=5))
    scheduler = Scheduler(app, clock=clock)
    scheduler.tick()
    assert {b.name for b in registered(app)} == {beat_name()[0], "quiet:2"}

    # Looked for again only after PRUNE_EVERY, whatever the refreshes in between.
    clock.advance(10 * 60)
    scheduler.tick()
    assert "quiet:2" in {b.name for b in registered(app)}
    clock.advance(PRUNE_EVERY.total_seconds())
    scheduler.tick()
    assert {b.name for b in registered(app)} == {beat_name()[0]}
    scheduler.close()


def test_closing_a_beat_leaves_the_other_beats_rows(app: Celery, clock: FrozenClock) -> None:
    add_other_beat(app, "other:3", clock.now)
    scheduler = Scheduler(app, clock=clock)
    scheduler.tick()
    scheduler.close()
    assert [b.name for b in registered(app)] == ["other:3"]


def test_a_beat_with_its_side_threads_registers_at_start_and_leaves_on_close(
    app: Celery, clock: FrozenClock
) -> None:
    scheduler = Scheduler(app, clock=clock, sender_thread=True)
    try:
        deadline = time.monotonic() + 10
        while not registered(app):  # written by the registry's thread
            assert time.monotonic() < deadline, "not registered by its thread"
            time.sleep(0.02)
        [row] = registered(app)
        assert row.last_tick_at == clock.now  # at start, before any tick
    finally:
        scheduler.close()
    assert registered(app) == []


def test_a_write_after_a_removal_that_came_before_any_write_adds_no_row(
    app: Celery, clock: FrozenClock
) -> None:
    from celery_gaffer.beat.registry import Registry

    # Beat closed before its side thread's first write ran: that write must not
    # register a Beat that is gone (it would show as a silent Beat for a day).
    registry = Registry(database_for(app), clock)
    registry.remove()
    registry.write()
    assert registered(app) == []
