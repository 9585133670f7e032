"""A run record's ``attempt`` on real SQLite and PostgreSQL, delivered as a worker delivers:
a task id's first delivery is attempt 1 without looking at earlier rows; a retry and a
redelivery count the rows recorded before them."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from celery import Celery
from celery.app.trace import build_tracer
from sqlalchemy import select

from celery_gaffer import GafferTask
from celery_gaffer.runs import endings
from celery_gaffer.store import database_for
from celery_gaffer.store.runs import start_statement

from .marks import marks_app


@pytest.fixture
def app(database_url: str) -> Iterator[Celery]:
    app = marks_app(database_url, "run-attempts-test")
    yield app
    app.close()


def attempts(app: Celery, task_id: str) -> list[int]:
    database = database_for(app)
    runs = database.models.JobRun
    endings.end_writer().write_in_order(lambda: None)  # queued ends written
    with database.read() as conn:
        query = select(runs.attempt).where(runs.task_id == task_id).order_by(runs.id)
        return list(conn.execute(query).scalars())


def test_a_retry_and_a_redelivery_count_the_runs_before_them(app: Celery) -> None:
    @app.task(base=GafferTask, bind=True, shared=False, name="t.attempt")
    def attempt(self: GafferTask) -> None:
        pass

    tracer = build_tracer(attempt.name, attempt, app=app, eager=False)

    def deliver(**request: Any) -> None:
        tracer("same-id", (), {}, {"id": "same-id", "delivery_info": {}, **request})

    deliver()
    assert attempts(app, "same-id") == [1]
    deliver(retries=1)
    assert attempts(app, "same-id") == [1, 2]
    deliver(retries=1, delivery_info={"redelivered": True})
    assert attempts(app, "same-id") == [1, 2, 3]
    deliver(delivery_info={"redelivered": True})
    assert attempts(app, "same-id") == [1, 2, 3, 4]
    # The same id sent again by a client as a new message: a first delivery, not counted.
    deliver()
    assert attempts(app, "same-id") == [1, 2, 3, 4, 1]


def test_a_first_deliverys_start_record_reads_no_earlier_rows(app: Celery) -> None:
    database = database_for(app)
    models, dialect = database.models, database.engine.dialect
    runs = models.JobRun.__tablename__
    first = str(
        start_statement(models, with_key_state=True, counted=False).compile(dialect=dialect)
    )
    counted = str(
        start_statement(models, with_key_state=True, counted=True).compile(dialect=dialect)
    )
    assert f"FROM {runs}" in counted
    assert f"FROM {runs}" not in first
