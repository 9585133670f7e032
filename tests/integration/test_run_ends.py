"""The ends of a worker's runs, written together by its end writer's thread, on real
SQLite and PostgreSQL: one statement for the ends queued side by side, and a bad end
costs only its own record."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from datetime import datetime, timezone
from typing import Any

import pytest
from celery import Celery
from celery.app.trace import build_tracer
from sqlalchemy import select

from celery_gaffer import GafferTask
from celery_gaffer.runs import endings
from celery_gaffer.runs.recorder import Recorder
from celery_gaffer.store import database_for
from celery_gaffer.store import runs as run_rows

from .marks import Mark, marks, marks_app

WAIT = 30.0


@pytest.fixture
def app(database_url: str) -> Iterator[Celery]:
    app = marks_app(database_url, "run-ends-test")
    yield app
    app.close()


def states(app: Celery, task_name: str) -> list[str]:
    database = database_for(app)
    runs = database.models.JobRun
    with database.read() as conn:
        query = select(runs.state).where(runs.task_name == task_name).order_by(runs.id)
        return list(conn.execute(query).scalars())


def hold_up(writer: endings.EndWriter) -> threading.Event:
    """Keep ``writer``'s thread busy until the returned event is set."""
    gate, started = threading.Event(), threading.Event()
    writer.submit(lambda: (started.set(), gate.wait(WAIT)), urgent=True)
    assert started.wait(WAIT)
    return gate


def test_the_ends_of_a_workers_runs_are_written_together_in_one_statement(
    app: Celery, monkeypatch: pytest.MonkeyPatch
) -> None:
    @app.task(base=GafferTask, bind=True, shared=False, name="t.mark", gaffer_key="mark:{n}")
    def mark(self: GafferTask, n: int) -> None:
        with self.session() as s:
            s.add(Mark(label=f"mark {n}"))

    batches: list[int] = []
    finish_runs = run_rows.finish_runs

    def spy(conn: Any, models: Any, ends: Any) -> None:
        batches.append(len(ends))
        finish_runs(conn, models, ends)

    monkeypatch.setattr(run_rows, "finish_runs", spy)
    writer = endings.end_writer()
    gate = hold_up(writer)
    tracer = build_tracer(mark.name, mark, app=app, eager=False)
    for n in range(5):  # delivered as a worker delivers them: their ends are queued
        task_id = f"mark-{n}-{time.monotonic_ns()}"
        tracer(task_id, (n,), {}, {"id": task_id, "delivery_info": {}})
    assert states(app, "t.mark") == ["running"] * 5
    gate.set()
    writer.write_in_order(lambda: None)  # the queued ends are written
    assert batches == [5]
    assert states(app, "t.mark") == ["succeeded"] * 5
    assert marks(app) == [f"mark {n}" for n in range(5)]
    database = database_for(app)
    runs = database.models.JobRun
    with database.read() as conn:
        rows = conn.execute(
            select(runs.key, runs.finished_at, runs.duration, runs.error_type).order_by(runs.id)
        ).all()
    assert [row.key for row in rows] == [f"mark:{n}" for n in range(5)]
    assert all(row.finished_at is not None and row.duration >= 0 for row in rows)
    assert {row.error_type for row in rows} == {None}


def test_failed_runs_ends_keep_their_errors_when_written_together(app: Celery) -> None:
    @app.task(base=GafferTask, bind=True, shared=False, name="t.fail")
    def fail(self: GafferTask, n: int) -> None:
        raise ValueError(f"bad input {n}")

    writer = endings.end_writer()
    gate = hold_up(writer)
    tracer = build_tracer(fail.name, fail, app=app, eager=False)
    for n in range(3):
        task_id = f"fail-{n}-{time.monotonic_ns()}"
        tracer(task_id, (n,), {}, {"id": task_id, "delivery_info": {}})
    gate.set()
    writer.write_in_order(lambda: None)
    database = database_for(app)
    runs = database.models.JobRun
    with database.read() as conn:
        rows = conn.execute(
            select(runs.state, runs.error_type, runs.error_message).order_by(runs.id)
        ).all()
    assert [tuple(row) for row in rows] == [
        ("failed", "ValueError", f"bad input {n}") for n in range(3)
    ]


def test_a_bad_end_in_a_batch_costs_only_its_own_record(
    postgres_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """PostgreSQL applies the batch's statements all or none: the good ends are then
    written one by one, and the bad one is one WARNING line naming its run."""
    app = marks_app(postgres_url, "run-ends-test")
    database = database_for(app)
    now = datetime.now(timezone.utc)
    run = {"task_name": "t.batch", "attempt": 1, "state": "running", "updated_at": now}
    with database.begin() as conn:
        run_rows.insert_runs(conn, database.models, [{**run, "task_id": f"r{n}"} for n in range(3)])
        runs = database.models.JobRun
        ids = list(conn.execute(select(runs.id).order_by(runs.id)).scalars())
    ends = [
        (row_id, f"r{n}", {"state": "x" * 40 if n == 1 else "succeeded", "finished_at": now})
        for n, row_id in enumerate(ids)
    ]
    with caplog.at_level(logging.WARNING, logger="celery_gaffer.runs"):
        Recorder(app).write_ends(database, ends)
    assert states(app, "t.batch") == ["succeeded", "running", "succeeded"]
    (record,) = [r for r in caplog.records if r.name == "celery_gaffer.runs"]
    assert record.getMessage().startswith("could not record the end of run r1: ")
    assert "\n" not in record.getMessage()
    assert record.exc_info is None
    app.close()
