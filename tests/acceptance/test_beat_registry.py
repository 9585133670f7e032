"""Real ``celery beat -S gaffer`` processes keep their row in the Beats' registry and
resume the schedules whose pause ended (PostgreSQL, Redis)."""

from __future__ import annotations

import os
import signal
import socket
import time
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import TypeVar

import pytest
from celery import Celery
from sqlalchemy import func, select

from celery_gaffer import ScheduleStore, every
from celery_gaffer.store import database_for
from celery_gaffer.store.beats import BeatInfo, beats

from ..processes import CeleryProcess, celery_processes
from .project import write_project
from .test_beat_stops import STOP_WITHIN

pytestmark = [pytest.mark.acceptance, pytest.mark.postgres, pytest.mark.redis]

T = TypeVar("T")


def _app(broker: str, database: str) -> Celery:
    app = Celery("proj", broker=broker, set_as_current=False)
    app.conf.gaffer_database_url = database

    @app.task(name="proj.record", shared=False)
    def record(*args: object, **kwargs: object) -> None:
        return None

    return app


def _registered(app: Celery) -> list[BeatInfo]:
    database = database_for(app)
    with database.read() as conn:
        return beats(conn, database.models)


def _eventually(found: Callable[[], T], timeout: float, what: str, log: Callable[[], str]) -> T:
    deadline = time.monotonic() + timeout
    while True:
        value = found()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"{what} not within {timeout:g} s:\n{log()[-5000:]}")
        time.sleep(0.1)


def _beat(tmp_path: Path, module: str) -> CeleryProcess:
    return CeleryProcess(
        tmp_path,
        module,
        ["beat", "-S", "gaffer", "-l", "INFO", "-s", str(tmp_path / "beat-schedule")],
        "beat",
    )


def test_a_beat_registers_within_seconds_keeps_ticking_and_leaves_on_sigterm(
    tmp_path: Path, postgres_url: str, redis_url: str
) -> None:
    module = write_project(tmp_path, redis_url, postgres_url)
    app = _app(redis_url, postgres_url)
    with celery_processes() as started:
        beat = _beat(tmp_path, module)
        started.append(beat)
        [row] = _eventually(lambda: _registered(app), 30, "the Beat's row", beat.log)
        assert (row.host, row.pid) == (socket.gethostname(), beat.pid)
        assert row.name == f"{row.host}:{row.pid}"
        first = row.last_tick_at
        # Refreshed as it ticks, at most every few seconds.
        _eventually(
            lambda: [b for b in _registered(app) if b.last_tick_at > first],
            15,
            "a refresh of last_tick_at",
            beat.log,
        )
        sent = time.monotonic()
        os.kill(beat.pid, signal.SIGTERM)
        beat.process.wait(STOP_WITHIN + 15)
        took = time.monotonic() - sent
        log = beat.log()
    assert took < STOP_WITHIN, log
    assert beat.process.returncode == 0, log
    assert _registered(app) == [], log
    assert "Traceback" not in log


def test_a_real_beat_resumes_a_schedule_whose_pause_ended_and_it_fires(
    tmp_path: Path, postgres_url: str, redis_url: str
) -> None:
    module = write_project(tmp_path, redis_url, postgres_url)
    app = _app(redis_url, postgres_url)
    store = ScheduleStore(app)
    store.add("wakes", "proj.record", every(1))
    ends = datetime.now(timezone.utc) + timedelta(seconds=3)
    store.pause("wakes", note="bank holiday", until=ends)
    database = database_for(app)
    fires = database.models.Fire

    def fired_after_pause() -> int:
        with database.read() as conn:
            count = conn.execute(
                select(func.count()).where(fires.schedule == "wakes", fires.nominal_at > ends)
            ).scalar()
        return int(count or 0)

    with celery_processes() as started:
        beat = _beat(tmp_path, module)
        started.append(beat)
        beat.wait_for_log("resumed schedule wakes: its pause ended", timeout=60)
        _eventually(fired_after_pause, 20, "a fire after the pause", beat.log)
        log = beat.log()
    resumed = store.get("wakes")
    assert resumed.policy.enabled
    assert (resumed.paused_note, resumed.paused_until) == (None, None)
    # The audit log says Beat resumed it, and why.
    latest = store.audit("wakes")[0]
    assert (latest.action, latest.actor, latest.source) == ("resume", "beat", "beat")
    assert latest.note == f"paused until {ends.isoformat()} passed"
    assert latest.changes["enabled"] == [False, True]
    with database.read() as conn:
        during = conn.execute(
            select(func.count()).where(fires.schedule == "wakes", fires.nominal_at <= ends)
        ).scalar()
    assert during == 0, log  # the fires of the pause were never sent
    assert "Traceback" not in log
