"""The database layer against real SQLite files and a real PostgreSQL server."""

from __future__ import annotations

import multiprocessing
import os
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import bindparam, inspect, select, text, update

from celery_gaffer.settings import GafferSettings, parse_database_url
from celery_gaffer.store import (
    current_revision,
    get_engine,
    head_revision,
    migrate,
    models_for,
    partitions,
)
from celery_gaffer.store.database import Database
from celery_gaffer.store.types import UTCDateTime


@pytest.fixture(params=["sqlite", "postgresql"])
def empty_url(request: pytest.FixtureRequest, tmp_path: Any) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'empty.sqlite3'}"
    return str(request.getfixturevalue("empty_postgres_url"))


@pytest.mark.parametrize("prefix", ["gaffer_", "jobs_"])
def test_migrate_creates_every_table_and_is_idempotent(empty_url: str, prefix: str) -> None:
    engine = get_engine(parse_database_url(empty_url))
    models = models_for(prefix)
    assert current_revision(engine, prefix) is None

    assert migrate(engine, prefix) == (None, head_revision())
    tables = set(inspect(engine).get_table_names())
    expected = {t.name for t in models.metadata.sorted_tables} | {models.version_table}
    assert expected <= tables
    assert all(name.startswith(prefix) for name in expected)

    with engine.connect() as conn:
        before = conn.execute(text(f"SELECT version_num FROM {models.version_table}")).all()
    assert migrate(engine, prefix) == (head_revision(), head_revision())
    with engine.connect() as conn:
        after = conn.execute(text(f"SELECT version_num FROM {models.version_table}")).all()
    assert before == after == [(head_revision(),)]
    assert set(inspect(engine).get_table_names()) == tables


def test_migrated_schema_equals_the_models(empty_url: str) -> None:
    """The tables are the models' (on PostgreSQL, the partitions of the partitioned ones
    are the database's own business)."""
    engine = get_engine(parse_database_url(empty_url))
    migrate(engine, "gaffer_")
    models = models_for("gaffer_")
    with engine.connect() as conn:
        weeks = {
            part.name
            for target in partitions.partitioned(models)
            if partitions.is_partitioned(conn, target.name)
            for part in partitions.partitions(conn, target.name)
        }
        assert bool(weeks) == empty_url.startswith("postgresql")
        context = MigrationContext.configure(
            conn,
            opts={
                "compare_type": True,
                "include_name": lambda name, type_, _parents: (
                    type_ != "table"
                    or (
                        (name or "").startswith("gaffer_")
                        and name != models.version_table
                        and name not in weeks
                    )
                ),
            },
        )
        diff = compare_metadata(context, models.metadata)
    assert diff == []


def test_the_bounds_migration_keeps_existing_schedules_and_counts_from_zero(
    empty_url: str,
) -> None:
    engine = get_engine(parse_database_url(empty_url))
    assert migrate(engine, "gaffer_", to="0002") == (None, "0002")
    now = datetime(2026, 6, 1, tzinfo=timezone.utc)
    with engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO gaffer_schedules (name, task, schedule, args, kwargs, options, "
                "catchup, overlap, enabled, source, watermark_at, health, "
                "consecutive_failures, created_at, updated_at) VALUES ('old', 't', "
                "'{\"kind\": \"every\", \"interval\": 60}', '[]', '{}', '{}', 'latest', "
                "'allow', :yes, 'db', :now, 'ok', 0, :now, :now)"
            ).bindparams(bindparam("now", type_=UTCDateTime())),
            {"now": now, "yes": True},
        )
    assert migrate(engine, "gaffer_", to="0003") == ("0002", "0003")
    models = models_for("gaffer_")
    table = models.Schedule.__table__  # type: ignore[attr-defined]
    with engine.connect() as conn:
        row = conn.execute(
            select(table.c.fired_count, table.c.max_runs, table.c.start_at, table.c.end_at)
        ).one()
    assert tuple(row) == (0, None, None, None)
    assert migrate(engine, "gaffer_", to="0002") == ("0003", "0002")
    assert "fired_count" not in {c["name"] for c in inspect(engine).get_columns("gaffer_schedules")}


def test_datetimes_round_trip_as_aware_utc(database_url: str) -> None:
    database = Database(GafferSettings.from_conf({"gaffer_database_url": database_url}))
    lease = database.models.Lease
    local = datetime(2026, 3, 8, 1, 59, 30, 123456, tzinfo=timezone(timedelta(hours=-5)))
    with database.begin() as conn:
        conn.execute(lease.__table__.insert().values(name="x", fence=1, lease_until=local))  # type: ignore[attr-defined]
    with database.read() as conn:
        stored = conn.execute(select(lease.lease_until)).scalar_one()
        earlier = conn.execute(
            select(lease.name).where(lease.lease_until < local + timedelta(microseconds=1))
        ).scalar_one()
    assert stored == local
    assert stored.tzinfo == timezone.utc
    assert earlier == "x"
    with pytest.raises(Exception, match="naive datetime"), database.begin() as conn:
        conn.execute(update(lease).values(lease_until=datetime(2026, 1, 1)))


def _child_engine_report(url: str, parent_engine_id: int, queue: Any) -> None:
    engine = get_engine(parse_database_url(url))
    with engine.connect() as conn:
        value = conn.execute(text("SELECT 1")).scalar_one()
    queue.put((id(engine) != parent_engine_id, value, os.getpid()))


# Python 3.12+ warns on every fork of a process with threads; this one forks on purpose,
# as Celery's prefork pool does.
@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning")
def test_a_forked_child_gets_its_own_engine(database_url: str) -> None:
    engine = get_engine(parse_database_url(database_url))
    with engine.connect() as conn:
        conn.execute(text("SELECT 1"))
    assert engine.pool.checkedin() >= 1  # the parent holds a pooled connection across fork

    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    child = ctx.Process(target=_child_engine_report, args=(database_url, id(engine), queue))
    child.start()
    own_engine, value, pid = queue.get(timeout=30)
    child.join(30)
    assert child.exitcode == 0
    assert own_engine is True
    assert value == 1
    assert pid != os.getpid()
    # The parent's pooled connection survived the child's exit.
    assert get_engine(parse_database_url(database_url)) is engine
    with engine.connect() as conn:
        assert conn.execute(text("SELECT 2")).scalar_one() == 2


def _increment(url: str, times: int) -> None:
    database = Database(GafferSettings.from_conf({"gaffer_database_url": url}))
    lease = database.models.Lease
    for _ in range(times):
        with database.begin() as conn:
            # Read-then-write under SELECT ... FOR UPDATE. SQLite has no FOR UPDATE, so
            # there BEGIN IMMEDIATE must give the same guarantee: without it two writers
            # lose updates or fail with "database is locked" upgrading a read to a write.
            fence = conn.execute(
                select(lease.fence).where(lease.name == "counter").with_for_update()
            ).scalar_one()
            conn.execute(update(lease).where(lease.name == "counter").values(fence=fence + 1))


def test_concurrent_read_modify_write_transactions_lose_nothing(database_url: str) -> None:
    database = Database(GafferSettings.from_conf({"gaffer_database_url": database_url}))
    with database.begin() as conn:
        conn.execute(
            database.models.Lease.__table__.insert().values(  # type: ignore[attr-defined]
                name="counter", fence=0, lease_until=datetime.now(timezone.utc)
            )
        )
    ctx = multiprocessing.get_context("spawn")
    workers = [ctx.Process(target=_increment, args=(database_url, 100)) for _ in range(4)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(120)
        assert worker.exitcode == 0
    with database.read() as conn:
        total = conn.execute(select(database.models.Lease.fence)).scalar_one()
    assert total == 400


def test_autocommit_connections_are_kept_and_dropped_when_the_server_went_away(
    postgres_url: str,
) -> None:
    """The autocommit pools keep their connections checked out between uses (no pool
    round trip per statement); one that raised is not kept; when a statement finds the
    server gone, the other idle connections are dropped too, so the next use works."""
    from celery_gaffer.exceptions import DatabaseUnavailable

    database = Database(GafferSettings(database_url=parse_database_url(postgres_url)))

    def backend(conn: Any) -> int:
        return int(conn.execute(text("SELECT pg_backend_pid()")).scalar_one())

    with database.autocommit(relaxed=True) as first, database.autocommit(relaxed=True) as second:
        backend(first), backend(second)
    with database.autocommit(relaxed=True) as again:
        assert again is first  # the same Connection object, kept checked out (LIFO)
    with (
        pytest.raises(Exception, match="division by zero"),
        database.autocommit(relaxed=True) as failing,
    ):
        failing.execute(text("SELECT 1 / 0"))
    assert failing.closed  # returned to the pool, not kept
    with database.autocommit(relaxed=True) as conn, database.autocommit(relaxed=True) as other:
        assert failing not in (conn, other)
        kept = {backend(conn), backend(other)}
    with get_engine(parse_database_url(postgres_url)).connect() as admin:
        admin.execute(
            text("SELECT pg_terminate_backend(pid) FROM unnest(:pids) AS pid"),
            {"pids": list(kept)},
        )
    # The first use meets a dead connection (as any pool's would, without a pre-ping)...
    with pytest.raises(DatabaseUnavailable), database.autocommit(relaxed=True) as conn:
        backend(conn)
    # ...and the other idle one, dead as well, is not handed out after it.
    with database.autocommit(relaxed=True) as conn:
        assert backend(conn) not in kept


def test_the_bulk_insert_writes_every_column_of_the_schedules_table() -> None:
    from celery_gaffer.store.schedule_bulk import _INSERT_COLUMNS

    table = models_for("gaffer_").Schedule.__table__  # type: ignore[attr-defined]
    assert {name for name, _ in _INSERT_COLUMNS} == set(table.c.keys()) - {"id"}


def test_a_bulk_load_under_row_level_security_falls_back_to_insert(empty_postgres_url: str) -> None:
    """COPY is refused on a table with row-level security: add_many inserts instead."""
    import uuid

    import psycopg
    from celery import Celery
    from sqlalchemy.engine import make_url

    from celery_gaffer import ScheduleStore, every
    from celery_gaffer.store import dispose_engines

    admin = make_url(empty_postgres_url)
    migrate(get_engine(admin), "gaffer_")
    role = f"gaffer_rls_{uuid.uuid4().hex[:8]}"
    libpq = admin.set(drivername="postgresql").render_as_string(hide_password=False)
    with psycopg.connect(libpq, autocommit=True) as conn:
        conn.execute(f'CREATE ROLE "{role}" LOGIN')
        conn.execute(f'GRANT ALL ON ALL TABLES IN SCHEMA public TO "{role}"')
        conn.execute(f'GRANT ALL ON ALL SEQUENCES IN SCHEMA public TO "{role}"')
        conn.execute("ALTER TABLE gaffer_schedules ENABLE ROW LEVEL SECURITY")
        conn.execute("CREATE POLICY everything ON gaffer_schedules USING (true) WITH CHECK (true)")
    try:
        app = Celery("rls", broker="memory://", set_as_current=False)
        app.conf.gaffer_database_url = admin.set(username=role).render_as_string(False)

        @app.task(name="t.noop", shared=False)
        def noop() -> None:
            return None

        store = ScheduleStore(app)
        entries = [{"name": f"n{i}", "task": "t.noop", "schedule": every(60)} for i in range(3)]
        assert store.add_many(entries) == 3
        assert [s.name for s in store.list()] == ["n0", "n1", "n2"]
    finally:
        dispose_engines()
        with psycopg.connect(libpq, autocommit=True) as conn:
            conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s",
                (role,),
            )
            conn.execute("DROP OWNED BY " + f'"{role}"')
            conn.execute(f'DROP ROLE "{role}"')
