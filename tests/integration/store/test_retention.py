"""Retention: ``cleanup`` deletes in bounded batches and keeps what is recent or still
running (SQLite and PostgreSQL)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from sqlalchemy import func, select

from celery_gaffer import GafferError
from celery_gaffer.store import database_for
from celery_gaffer.store.retention import cleanup

from ...support import noop_app

NOW = datetime(2026, 6, 1, 12, 0, tzinfo=timezone.utc)
OLD = NOW - timedelta(days=31)


@pytest.fixture
def database(database_url: str) -> Iterator[Any]:
    with noop_app("retention", database_url) as app:
        database = database_for(app)
        database.migrate()
        yield database


def add_runs(database: Any, *rows: tuple[str, datetime]) -> None:
    runs = database.models.JobRun.__table__
    with database.begin() as conn:
        for number, (state, updated_at) in enumerate(rows):
            conn.execute(
                runs.insert().values(
                    task_id=f"{state}-{number}-{updated_at:%d}",
                    task_name="t.noop",
                    state=state,
                    attempt=1,
                    updated_at=updated_at,
                )
            )


def states_left(database: Any) -> list[tuple[str, int]]:
    runs = database.models.JobRun.__table__
    with database.begin() as conn:
        query = select(runs.c.state, func.count()).group_by(runs.c.state).order_by(runs.c.state)
        return [(state, count) for state, count in conn.execute(query)]


def test_deletes_old_finished_runs_in_batches_and_keeps_the_rest(database: Any) -> None:
    add_runs(
        database,
        *[("succeeded", OLD)] * 5,
        ("running", OLD),  # still running, however old
        ("failed", NOW - timedelta(days=1)),  # within retention
    )
    report = cleanup(database, NOW, batch=2)
    assert report.runs == 5
    assert states_left(database) == [("failed", 1), ("running", 1)]
    assert cleanup(database, NOW, batch=2).runs == 0


def test_a_batch_below_one_is_refused_before_anything_is_deleted(database: Any) -> None:
    add_runs(database, ("succeeded", OLD))
    with pytest.raises(GafferError, match=r"^batch: ") as caught:
        cleanup(database, NOW, batch=0)
    assert caught.value.field == "batch"
    assert states_left(database) == [("succeeded", 1)]
