"""Weekly partitions of the ledger and the run records on PostgreSQL: made ahead, rows
of a week not made yet kept in the default partition and moved, weeks past retention
dropped whole, and a week with a row to keep left to the batched DELETE."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from sqlalchemy import func, inspect, select, text

from celery_gaffer.beat.partition_keeper import PartitionKeeper
from celery_gaffer.protocol import fire_key, fire_task_id
from celery_gaffer.store import database_for, partitions
from celery_gaffer.store.fires import NewFire, insert_fires
from celery_gaffer.store.retention import _runs_kept_indexed, cleanup

from ...support import noop_app
from .test_retention import deletes_per_table, migrated

WEEK = partitions.WEEK
# Far from today and from the other tests' times: these weeks are this file's own.
NOW = datetime(2024, 3, 6, 12, 0, tzinfo=timezone.utc)  # a Wednesday
OLD = NOW - timedelta(days=40)
RECENT = NOW - timedelta(days=1)


@pytest.fixture
def database(postgres_url: str) -> Iterator[Any]:
    with migrated(postgres_url) as database:
        with database.begin() as conn:
            partitions.ensure(conn, database.models, NOW, since=OLD - timedelta(days=7))
        yield database


def weeks_of(database: Any, table: Any) -> dict[str, partitions.Partition]:
    with database.begin() as conn:
        return {p.name: p for p in partitions.partitions(conn, table.name)}


def week_of(table: Any, at: datetime) -> str:
    return partitions.period_name(table.name, partitions.period_start(at, WEEK), WEEK)


def add_run(database: Any, state: str, created_at: datetime, updated_at: datetime) -> None:
    runs = database.models.JobRun.__table__
    with database.begin() as conn:
        conn.execute(
            runs.insert().values(
                task_id=f"{state}-{created_at:%j}-{time.monotonic_ns()}", task_name="t.noop",
                state=state, attempt=1, created_at=created_at, updated_at=updated_at,
            )
        )  # fmt: skip


def add_fire(database: Any, nominal_at: datetime, state: str = "sent", **columns: Any) -> int:
    """A fire in the ledger (``created_at`` its nominal time unless given); its id."""
    fires = database.models.Fire.__table__
    key = fire_key("s", nominal_at)
    values = {
        "schedule": "s", "nominal_at": nominal_at, "key": key, "task_id": fire_task_id(key),
        "kind": "scheduled", "state": state, "publish_after": nominal_at, "publish_count": 1,
        "created_at": nominal_at, **columns,
    }  # fmt: skip
    with database.begin() as conn:
        return int(conn.execute(fires.insert().values(values).returning(fires.c.id)).scalar_one())


def where_is(database: Any, table: Any, column: str, value: Any) -> list[str]:
    """The partitions holding the rows of ``table`` whose ``column`` is ``value``."""
    with database.begin() as conn:
        return list(
            conn.execute(
                select(text("tableoid::regclass::text"))
                .select_from(table)
                .where(table.c[column] == value)
            ).scalars()
        )


def test_a_week_whose_rows_are_all_past_retention_is_dropped_whole(database: Any) -> None:
    models = database.models
    runs, fires = models.JobRun.__table__, models.Fire.__table__
    for hours in range(5):
        add_run(database, "succeeded", OLD + timedelta(hours=hours), OLD + timedelta(hours=hours))
        add_fire(database, OLD + timedelta(hours=hours))
    add_run(database, "failed", RECENT, RECENT)
    add_fire(database, RECENT)
    old_runs, old_fires = week_of(runs, OLD), week_of(fires, OLD)
    assert old_runs in weeks_of(database, runs)
    assert old_fires in weeks_of(database, fires)

    with deletes_per_table(database) as deletes:
        report = cleanup(database, NOW)
    assert (report.runs, report.fires) == (5, 5)
    assert old_runs not in weeks_of(database, runs)
    assert old_fires not in weeks_of(database, fires)
    # The batched DELETE found nothing left to delete: one statement per table.
    assert deletes == {
        "gaffer_job_runs": 1,
        "gaffer_fires": 1,
        "gaffer_keys": 1,
        "gaffer_alerts": 1,
    }
    with database.begin() as conn:
        assert conn.execute(select(func.count()).select_from(runs)).scalar() == 1
        assert conn.execute(select(func.count()).select_from(fires)).scalar() == 1
    # The current weeks and those ahead stay.
    assert week_of(runs, NOW) in weeks_of(database, runs)
    assert week_of(fires, NOW + partitions.ahead(WEEK)) in weeks_of(database, fires)


@pytest.mark.parametrize(
    "keeper", ["pending fire", "fire created lately", "running run", "run updated lately"]
)
def test_a_row_to_keep_keeps_its_week_and_the_old_rows_beside_it_are_deleted(
    database: Any, keeper: str
) -> None:
    models = database.models
    runs, fires = models.JobRun.__table__, models.Fire.__table__
    for hours in range(3):
        add_run(database, "succeeded", OLD + timedelta(hours=hours), OLD + timedelta(hours=hours))
        add_fire(database, OLD + timedelta(hours=hours))
    late = OLD + timedelta(hours=5)
    if keeper == "pending fire":
        add_fire(database, late, state="pending")
    elif keeper == "fire created lately":  # a backfill of an old nominal time, say
        add_fire(database, late, created_at=RECENT)
    elif keeper == "running run":
        add_run(database, "running", late, late)
    else:
        add_run(database, "lost", late, RECENT)

    report = cleanup(database, NOW, batch=2)
    table = fires if "fire" in keeper else runs
    assert week_of(table, OLD) in weeks_of(database, table)  # kept, not dropped
    assert (report.runs, report.fires) == (3, 3)  # the old rows went all the same
    with database.begin() as conn:
        assert conn.execute(select(func.count()).select_from(table)).scalar() == 1


def test_two_cleanups_at_once_drop_each_week_once(database: Any) -> None:
    """The one that waited for the lock finds the week gone, counts nothing and goes on."""
    for hours in range(6):
        add_run(database, "succeeded", OLD + timedelta(hours=hours), OLD + timedelta(hours=hours))
        add_fire(database, OLD + timedelta(hours=hours))
    start = threading.Barrier(2)
    reports: list[Any] = []
    failures: list[BaseException] = []

    def clean() -> None:
        start.wait()
        try:
            reports.append(cleanup(database, NOW))
        except BaseException as exc:  # noqa: BLE001 - reported by the assertion below
            failures.append(exc)

    threads = [threading.Thread(target=clean) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert failures == []
    assert sum(r.runs for r in reports) == 6
    assert sum(r.fires for r in reports) == 6


def test_a_write_between_the_check_and_the_lock_keeps_the_week(database: Any) -> None:
    """What the unlocked check saw is checked again under the lock: a run updated since
    (here, the first check sees nothing at all) keeps its week."""
    runs = database.models.JobRun.__table__
    add_run(database, "lost", OLD, RECENT)
    target = partitions.partitioned(database.models)[1]
    week = weeks_of(database, runs)[week_of(runs, OLD)]
    with database.begin() as conn:
        found = partitions.drop_if_expired(
            conn, target, week, lambda part: [], _runs_kept_indexed(NOW - timedelta(days=30))
        )
    assert found is None
    assert week.name in weeks_of(database, runs)


def holding(database: Any, table: str) -> tuple[threading.Thread, threading.Event]:
    """A thread holding ``table`` in ROW EXCLUSIVE mode (as a writer does) until the
    returned event is set."""
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        with database.engine.connect() as conn, conn.begin():
            conn.execute(text(f"LOCK TABLE {table} IN ROW EXCLUSIVE MODE"))
            held.set()
            release.wait(30)

    holder = threading.Thread(target=hold)
    holder.start()
    held.wait(10)
    return holder, release


def test_a_drop_waits_out_a_busy_table_then_lands(database: Any) -> None:
    """The drop's lock waits at most a moment at a time (a query queued behind it waits
    no longer), and is tried again until the table is free."""
    fires = database.models.Fire.__table__
    add_fire(database, OLD)
    holder, release = holding(database, "gaffer_fires")
    threading.Timer(1.5, release.set).start()
    started = time.monotonic()
    try:
        report = cleanup(database, NOW)
    finally:
        release.set()
        holder.join(10)
    assert time.monotonic() - started >= 1.0
    assert report.fires == 1
    assert week_of(fires, OLD) not in weeks_of(database, fires)


def test_a_table_busy_for_longer_is_left_to_the_batched_delete(
    database: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    fires = database.models.Fire.__table__
    add_fire(database, OLD)
    monkeypatch.setattr(partitions, "DROP_TRIES", 2)
    assert week_of(fires, OLD) == "gaffer_fires_p20240122"
    holder, release = holding(database, "gaffer_fires_p20240122")
    try:
        with caplog.at_level(logging.WARNING, logger="celery_gaffer.store"):
            report = cleanup(database, NOW)
    finally:
        release.set()
        holder.join(10)
    assert report.fires == 1  # deleted in a batch instead
    assert week_of(fires, OLD) in weeks_of(database, fires)
    busy = [r for r in caplog.records if getattr(r, "action", "") == "partition_drop_busy"]
    # The locked week, and any other due to go meanwhile (the drop locks the whole table).
    assert "gaffer_fires_p20240122" in {getattr(r, "partition", None) for r in busy}
    assert all("\n" not in r.getMessage() for r in busy)


def test_a_fire_of_a_week_not_made_yet_waits_in_the_default_partition_then_moves(
    database: Any,
) -> None:
    fires = database.models.Fire.__table__
    later = NOW + partitions.ahead(WEEK) + timedelta(days=10)
    fire_id = add_fire(database, later, state="pending")
    assert where_is(database, fires, "id", fire_id) == ["gaffer_fires_default"]

    with database.begin() as conn:
        made = partitions.ensure(conn, database.models, later)
    assert week_of(fires, later) in made
    assert where_is(database, fires, "id", fire_id) == [week_of(fires, later)]
    # Still one fire per (schedule, nominal): a second insert of it is a conflict.
    fire = NewFire("s", later, "scheduled", "pending", later, 0)
    with database.begin() as conn:
        assert insert_fires(conn, database.models, [fire], later) == []
        assert conn.execute(select(func.count()).select_from(fires)).scalar() == 1


def test_beat_makes_the_weeks_ahead_when_fewer_than_a_week_are_left(
    empty_postgres_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    with migrated(empty_postgres_url) as database:
        fires, runs = database.models.Fire.__table__, database.models.JobRun.__table__
        now = datetime.now(timezone.utc)
        keeper = PartitionKeeper(database)
        with caplog.at_level(logging.INFO, logger="celery_gaffer.scheduler"):
            keeper.keep(now)  # the migration made two weeks ahead: nothing to make
            assert not [r for r in caplog.records if getattr(r, "action", "") == "partition_made"]
            later = now + timedelta(days=13)  # less than a week left
            assert week_of(fires, later + partitions.ahead(WEEK)) not in weeks_of(database, fires)
            keeper.keep(later)
        assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
        made = {
            getattr(r, "partition", None)
            for r in caplog.records
            if getattr(r, "action", "") == "partition_made"
        }
        ahead = later + partitions.ahead(WEEK)
        assert {week_of(fires, ahead), week_of(runs, ahead)} <= made
        assert week_of(fires, ahead) in weeks_of(database, fires)


def test_migrating_a_database_with_rows_keeps_them_ids_and_uniqueness(
    empty_postgres_url: str,
) -> None:
    with migrated(empty_postgres_url) as database:
        database.migrate("0003")
        models = database.models
        runs, fires = models.JobRun.__table__, models.Fire.__table__
        with database.begin() as conn:
            for day in range(3):
                at = OLD + timedelta(days=day)
                conn.execute(
                    runs.insert().values(
                        task_id=f"r{day}", task_name="t", state="succeeded", attempt=1,
                        updated_at=at,
                    )
                )  # fmt: skip
        for day in range(3):
            add_fire(database, OLD + timedelta(days=day))
        with database.begin() as conn:
            before_ids = sorted(conn.execute(select(runs.c.id)).scalars())

        assert database.migrate("0004") == ("0003", "0004")
        assert "gaffer_fires_history" in weeks_of(database, fires)
        assert "gaffer_job_runs_history" in weeks_of(database, runs)
        with database.begin() as conn:
            assert sorted(conn.execute(select(runs.c.id)).scalars()) == before_ids
            assert conn.execute(select(func.count()).select_from(fires)).scalar() == 3
            fire = NewFire("s", OLD, "scheduled", "pending", OLD, 0)
            assert insert_fires(conn, models, [fire], OLD) == []  # still there: a conflict
        add_run(database, "succeeded", RECENT, RECENT)
        with database.begin() as conn:
            assert max(conn.execute(select(runs.c.id)).scalars()) > max(before_ids)

        assert database.migrate("0003") == ("0004", "0003")
        with database.begin() as conn:
            assert conn.execute(select(func.count()).select_from(fires)).scalar() == 3
            assert conn.execute(select(func.count()).select_from(runs)).scalar() == 4
            kinds = conn.execute(
                text(
                    "SELECT relkind FROM pg_class "
                    "WHERE relname IN ('gaffer_fires', 'gaffer_job_runs')"
                )
            ).scalars()
            assert set(kinds) == {"r"}
        assert "created_at" not in {
            c["name"] for c in inspect(database.engine).get_columns("gaffer_job_runs")
        }


def test_an_hourly_interval_makes_hours_and_cleanup_drops_the_hours_past_retention(
    empty_postgres_url: str,
) -> None:
    hour = timedelta(hours=1)
    conf = {
        "gaffer_partition_interval": 3600,
        "gaffer_run_retention": 2 * 3600,
        "gaffer_ledger_retention": 2 * 3600,
    }
    with noop_app("hourly", empty_postgres_url, **conf) as app:
        database = database_for(app)
        database.migrate()
        fires = database.models.Fire.__table__
        now = datetime.now(timezone.utc)
        names = weeks_of(database, fires)
        assert partitions.period_name(fires.name, partitions.period_start(now, hour), hour) in names
        six_ahead = partitions.period_start(now + 6 * hour, hour)
        assert partitions.period_name(fires.name, six_ahead, hour) in names

        with database.begin() as conn:
            partitions.ensure(conn, database.models, now, hour, since=now - 5 * hour)
        old = now - 4 * hour
        add_fire(database, old)
        add_fire(database, now - 10 * timedelta(minutes=1))
        old_hour = partitions.period_name(fires.name, partitions.period_start(old, hour), hour)
        assert old_hour in weeks_of(database, fires)
        assert cleanup(database, now).fires == 1
        assert old_hour not in weeks_of(database, fires)
        with database.begin() as conn:
            assert conn.execute(select(func.count()).select_from(fires)).scalar() == 1
