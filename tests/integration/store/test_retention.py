"""Retention: ``cleanup`` deletes in bounded batches and keeps what is recent or still
running (SQLite and PostgreSQL)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from sqlalchemy import event, func, select

from celery_gaffer import GafferError
from celery_gaffer.store import database_for
from celery_gaffer.store.retention import cleanup

from ...support import noop_app

NOW = datetime(2026, 6, 1, 12, 0, tzinfo=timezone.utc)
OLD = NOW - timedelta(days=31)


@contextmanager
def migrated(url: str) -> Iterator[Any]:
    """The Gaffer database of an app on ``url``, its tables created."""
    with noop_app("retention", url) as app:
        database = database_for(app)
        database.migrate()
        yield database


@pytest.fixture
def database(database_url: str) -> Iterator[Any]:
    with migrated(database_url) as database:
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


@contextmanager
def deletes_per_table(database: Any) -> Iterator[dict[str, int]]:
    """The DELETE statements cleanup sends, counted by table."""
    engine = database.engine
    counts: dict[str, int] = {}

    def count(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if statement.lstrip().upper().startswith("DELETE FROM"):
            name = statement.split()[2]
            counts[name] = counts.get(name, 0) + 1

    event.listen(engine, "before_cursor_execute", count)
    try:
        yield counts
    finally:
        event.remove(engine, "before_cursor_execute", count)


def test_a_whole_number_of_batches_takes_one_statement_each_and_one_to_find_none_left(
    database: Any,
) -> None:
    add_runs(database, *[("succeeded", OLD)] * 4)
    with deletes_per_table(database) as counts:
        assert cleanup(database, NOW, batch=2).runs == 4
        assert counts["gaffer_job_runs"] == 3  # 2, 2, then 0: one DELETE per batch
    assert states_left(database) == []


def test_old_completed_keys_and_old_sent_fires_go_unfinished_ones_stay(database: Any) -> None:
    models = database.models
    keys, fires = models.IdempotencyKey.__table__, models.Fire.__table__
    with database.begin() as conn:
        for number, (state, completed_at) in enumerate(
            [("completed", OLD), ("completed", OLD), ("completed", NOW), ("claimed", None)]
        ):
            conn.execute(
                keys.insert().values(
                    key=f"k{number}", state=state, task_id=f"t{number}",
                    claimed_at=OLD, completed_at=completed_at,
                )
            )  # fmt: skip
        for number, state in enumerate(["sent", "missed", "pending", "sent"]):
            at = OLD + timedelta(minutes=number)
            conn.execute(
                fires.insert().values(
                    schedule="s", nominal_at=at, key=f"s@{number}", task_id=f"f{number}",
                    state=state, publish_after=at, created_at=NOW if number == 3 else at,
                )
            )  # fmt: skip
    report = cleanup(database, NOW, batch=1)
    assert (report.keys, report.fires) == (2, 2)
    with database.begin() as conn:
        assert sorted(conn.execute(select(keys.c.key)).scalars()) == ["k2", "k3"]
        assert sorted(conn.execute(select(fires.c.key)).scalars()) == ["s@2", "s@3"]


def test_a_batch_below_one_is_refused_before_anything_is_deleted(database: Any) -> None:
    add_runs(database, ("succeeded", OLD))
    with pytest.raises(GafferError, match=r"^batch: ") as caught:
        cleanup(database, NOW, batch=0)
    assert caught.value.field == "batch"
    assert states_left(database) == [("succeeded", 1)]


def test_two_cleanups_at_once_delete_every_old_row_once(postgres_url: str) -> None:
    """PostgreSQL: two cleanups racing for the same batches (one row each) may each stop
    early, but not both: together they delete every old row, each once."""
    import threading

    with migrated(postgres_url) as database:
        add_runs(database, *[("succeeded", OLD)] * 60, ("succeeded", NOW))
        reports: list[int] = []
        start = threading.Barrier(2)

        def clean() -> None:
            start.wait()
            reports.append(cleanup(database, NOW, batch=1).runs)

        threads = [threading.Thread(target=clean) for _ in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        assert sum(reports) == 60
        assert states_left(database) == [("succeeded", 1)]
