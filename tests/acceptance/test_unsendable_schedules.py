"""A real ``celery beat -S gaffer`` process (PostgreSQL, Redis) with schedules it can never
send: a codec that fails every message, a compression kombu does not know, arguments
nested too deeply. Each goes to ``error`` after its first try instead of piling up
pending fires retried for ever; an ``every(1)`` schedule beside them keeps firing."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from celery import Celery
from kombu import compression
from sqlalchemy import JSON, Text, cast, func, literal, select, update

from celery_gaffer import ScheduleStore, every
from celery_gaffer.store import database_for

from ..processes import CeleryProcess, celery_processes
from ..support import message_headers
from .project import write_project

RUN_SECONDS = 12

# Registered in Beat's process (the project) and in this one (which stores the schedule).
BROKEN_CODEC = """
from kombu import compression


def _broken(body):
    raise KeyError("tenant-dictionary")  # its own lookup fails, for every message


compression.register(_broken, _broken, "application/x-gaffer-broken", ["broken"])
"""


def _broken(body: bytes) -> bytes:
    raise KeyError("tenant-dictionary")


compression.register(_broken, _broken, "application/x-gaffer-broken", ["broken"])


def _app(broker: str, database: str) -> Celery:
    app = Celery("proj", broker=broker, set_as_current=False)
    app.conf.gaffer_database_url = database

    @app.task(name="proj.record", shared=False)
    def record(*args: object, **kwargs: object) -> None:
        return None

    return app


def _hand_edit(app: Celery, name: str, **values: Any) -> None:
    database = database_for(app)
    table = database.models.Schedule.__table__  # type: ignore[attr-defined]
    with database.begin() as conn:
        conn.execute(update(table).where(table.c.name == name).values(**values))


@pytest.mark.acceptance
def test_beat_puts_unsendable_schedules_in_error_and_keeps_firing_the_others(
    tmp_path: Path, postgres_url: str, redis_url: str
) -> None:
    module = write_project(tmp_path, redis_url, postgres_url, extra=BROKEN_CODEC)
    app = _app(redis_url, postgres_url)
    store = ScheduleStore(app)
    store.add("healthy", "proj.record", every(1))
    store.add("broken-codec", "proj.record", every(1), options={"compression": "broken"})
    store.add("bogus-compression", "proj.record", every(1))
    _hand_edit(app, "bogus-compression", options={"compression": "bogus"})
    store.add("deep-args", "proj.record", every(1))
    _hand_edit(app, "deep-args", args=cast(literal("[" * 5_000 + "]" * 5_000, Text), JSON))

    with celery_processes() as procs:
        beat = CeleryProcess(
            tmp_path,
            module,
            ["beat", "-S", "gaffer", "--loglevel=INFO", "-s", str(tmp_path / "beat")],
            "beat",
        )
        procs.append(beat)
        beat.wait_for_log("beat: Starting...")
        time.sleep(RUN_SECONDS)
        beat.stop()
        log = beat.log()

    sent = Counter(h["gaffer_schedule"] for h in message_headers(redis_url))
    assert sent["healthy"] >= RUN_SECONDS - 4, sent
    assert set(sent) == {"healthy"}
    errors = {s.name: s.error for s in store.list()}
    assert errors["healthy"] is None
    assert "the fire cannot be sent" in str(errors["broken-codec"])
    assert "tenant-dictionary" in str(errors["broken-codec"])
    assert "options.compression: 'bogus'" in str(errors["bogus-compression"])
    assert "args: JSON nested deeper than 64 levels" in str(errors["deep-args"])
    database = database_for(app)
    fires = database.models.Fire
    with database.read() as conn:
        pending = dict(
            conn.execute(  # type: ignore[arg-type]
                select(fires.schedule, func.count())
                .where(fires.state == "pending")
                .group_by(fires.schedule)
            ).all()
        )
    # Its one refused fire waits for the error to clear; no new fire piles up behind it.
    assert pending.get("broken-codec", 0) <= 1, pending
    assert "Traceback" not in log
    marked = [line for line in log.splitlines() if "marked in error" in line]
    for name in ("broken-codec", "bogus-compression", "deep-args"):
        assert any(f" {name} " in line for line in marked), log[-3000:]
