"""``gaffer status`` reads the survey as tuples, one shared health for the rows that
decide alike and its rows a batch ahead on a thread of their own: each row's state and
facts are still exactly what :func:`~celery_gaffer.beat.survey.survey` gives it (the
stored word where it holds, else Beat's evaluation; real SQLite and PostgreSQL)."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone

import pytest
from celery import Celery
from sqlalchemy import text

from celery_gaffer import ScheduleStore, cron, every
from celery_gaffer.beat.survey import (
    LAST_SUCCESS_AT,
    NAME,
    SCHEDULE,
    Prefetched,
    states,
    survey,
)
from celery_gaffer.cli.status_lines import Formats, status_json
from celery_gaffer.store import database_for

from ..support import FrozenClock, noop_app
from .test_status import add_fire, set_row

UTC = timezone.utc
START = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)


@pytest.fixture
def app(database_url: str) -> Iterator[Celery]:
    with noop_app("status-states-test", database_url) as app:
        yield app


def test_each_row_of_the_status_survey_is_beat_s_own_health(
    app: Celery, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(Prefetched, "BATCH", 3)  # several batches through the thread
    store = ScheduleStore(app, clock=FrozenClock(START))
    timings = [every(600), cron("*/10 * * * *", "Europe/Paris"), every(86400)]
    store.add_many(
        {"name": f"t{i:02d}", "task": "t.noop", "schedule": timings[i % 3]} for i in range(30)
    )
    now = START + timedelta(hours=3, seconds=5)
    for i in range(0, 30, 4):  # succeeded at a due fire: ok when evaluated
        set_row(app, f"t{i:02d}", last_success_nominal_at=now - timedelta(minutes=9, seconds=5))
    for i in range(1, 30, 4):
        set_row(app, f"t{i:02d}", last_success_at=START + timedelta(seconds=i))
        set_row(app, f"t{i:02d}", consecutive_failures=i % 5)
    for i in range(2, 30, 6):  # stored ok, the word holding: not evaluated
        set_row(app, f"t{i:02d}", health="ok", check_at=now + timedelta(hours=1))
    set_row(app, "t05", enabled=False)
    set_row(app, "t07", error="task: 't.gone' is not registered with this Beat's app")
    set_row(app, "t09", schedule={"kind": "fortnightly"})
    set_row(app, "t11", health="ok", check_at=now + timedelta(hours=1))
    set_row(app, "t11", schedule={"kind": "fortnightly"})  # a stored word does not hold it
    add_fire(app, "t04", START + timedelta(hours=2, minutes=50))
    database = database_for(app)
    with database.read() as conn:
        rows = list(states(conn, database.models, now, database.settings))
        alone = [health for _, health in survey(conn, database.models, now, database.settings)]
    assert [row[NAME] for row, _ in rows] == [health.schedule for health in alone]
    own = [
        dataclasses.replace(health, schedule=row[NAME], last_success_at=row[LAST_SUCCESS_AT])
        for row, health in rows
    ]
    assert own == alone
    assert {health.state for health in alone} == {"ok", "late", "failing", "paused", "error"}
    assert all(isinstance(row[SCHEDULE], str) for row, _ in rows)
    # Rows deciding alike share one health.
    assert len({id(health) for _, health in rows}) < len(rows)


def test_stopping_the_status_survey_early_leaves_the_transaction_usable(app: Celery) -> None:
    store = ScheduleStore(app, clock=FrozenClock(START))
    store.add_many({"name": f"t{i:02d}", "task": "t.noop", "schedule": every(60)} for i in range(9))
    database = database_for(app)
    with database.read() as conn:
        surveyed = states(conn, database.models, START + timedelta(hours=1), database.settings)
        first = next(surveyed)
        surveyed.close()
        assert first[0][NAME] == "t00"
        again = list(states(conn, database.models, START + timedelta(hours=1), database.settings))
    assert len(again) == 9


@pytest.fixture
def postgres_app(postgres_url: str) -> Iterator[Celery]:
    with noop_app("status-states-test", postgres_url) as app:
        yield app


def test_instants_are_utc_whatever_the_session_s_zone(postgres_app: Celery) -> None:
    """The status survey reads the instants it does not show as PostgreSQL hands them
    (in the session's zone, a PostgreSQL setting): what it reports is still in UTC."""
    app = postgres_app
    database = database_for(app)
    store = ScheduleStore(app, clock=FrozenClock(START))
    store.add_many(
        {"name": f"t{i:02d}", "task": "t.noop", "schedule": every(600)} for i in range(6)
    )
    set_row(app, "t01", last_success_nominal_at=START + timedelta(minutes=50))
    set_row(app, "t02", health="ok", check_at=START + timedelta(hours=9))
    add_fire(app, "t03", START + timedelta(minutes=30))
    now = START + timedelta(hours=1, seconds=5)
    formats = Formats()
    with database.read() as conn:
        conn.execute(text("SET LOCAL TIME ZONE 'Asia/Tokyo'"))
        rows = list(states(conn, database.models, now, database.settings))
        alone = [health for _, health in survey(conn, database.models, now, database.settings)]
    for (row, shared), health in zip(rows, alone, strict=True):
        for value in dataclasses.astuple(shared):
            if isinstance(value, datetime):
                assert value.tzinfo is UTC
        line = formats.json_of(row[NAME], row[LAST_SUCCESS_AT], shared)
        assert line == json.dumps(status_json(health))
    assert {health.state for health in alone} == {"ok", "late"}
