"""The fenced commit: the seal's checks in the commit's own transaction, on real
PostgreSQL (and SQLite where the claim is about both)."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from celery import Celery
from sqlalchemy import event, select, text
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session

from celery_gaffer import FenceLost, GafferError, GafferTask
from celery_gaffer.exceptions import DatabaseUnavailable
from celery_gaffer.fencing.leases import LeaseClient
from celery_gaffer.store import database_for
from celery_gaffer.store.keys import key_state

from ..marks import Mark, marks, marks_app


@pytest.fixture
def app(database_url: str) -> Iterator[Celery]:
    app = marks_app(database_url, "fenced-commit-test")
    yield app
    app.close()


@pytest.fixture
def pg_app(postgres_url: str) -> Iterator[Celery]:
    app = marks_app(postgres_url, "fenced-commit-test")
    yield app
    app.close()


def stale_run(app: Celery, name: str, body: Any) -> tuple[threading.Thread, threading.Event]:
    """A task holding the lease ``name`` whose ``body(self, session)`` runs after a thief
    took that lease over; returns the started worker thread and the event to set once
    the lease is stolen."""
    holding = threading.Event()
    stolen = threading.Event()

    @app.task(base=GafferTask, bind=True, shared=False, name=f"t.{name}")
    def task(self: GafferTask) -> None:
        with self.lease(name, ttl=30):
            with self.session() as s:
                s.add(Mark(label="before"))
            holding.set()
            stolen.wait(10)
            with self.session() as s:
                body(self, s)

    worker = threading.Thread(target=lambda: task.apply())
    worker.start()
    assert holding.wait(10)
    LeaseClient(database_for(app)).acquire(name, "thief", 30, steal=True)
    return worker, stolen


def test_the_seal_comes_after_every_flush_so_a_takeover_before_the_commit_refuses_it(
    pg_app: Celery,
) -> None:
    """The seal runs at the commit itself, after every ``before_commit`` listener and
    flush: a lease taken over from a later listener (which also adds a row) is found
    stale, and nothing of the commit is written, the row flushed last included."""
    app = pg_app
    database = database_for(app)

    @app.task(base=GafferTask, bind=True, shared=False, name="t.late", gaffer_key="late")
    def task(self: GafferTask) -> None:
        with self.lease("late", ttl=30), self.session() as s:
            s.add(Mark(label="written under the lease"))

            @event.listens_for(s, "before_commit")
            def late(session: Session) -> None:  # runs after Gaffer's listener
                LeaseClient(database).acquire("late", "thief", 30, steal=True)
                session.add(Mark(label="flushed after the takeover"))

    result = task.apply()
    assert isinstance(result.result, FenceLost), result.result
    assert marks(app) == []
    with database.read() as conn:
        assert key_state(conn, database.models, "late") is None


def test_a_stale_fence_rolls_back_a_savepoint_and_its_transaction(app: Celery) -> None:
    def body(self: GafferTask, s: Session) -> None:
        s.add(Mark(label="outer"))
        with s.begin_nested():
            s.add(Mark(label="nested"))

    worker, stolen = stale_run(app, "nested", body)
    stolen.set()
    worker.join(30)
    assert marks(app) == ["before"]


def test_a_savepoint_claims_nothing_the_transactions_commit_claims_the_key(app: Celery) -> None:
    """A savepoint released inside a transaction that then rolls back claimed nothing: the
    run's next commit still claims and completes its key."""
    database = database_for(app)

    @app.task(base=GafferTask, bind=True, shared=False, gaffer_key="saved", name="t.saved")
    def task(self: GafferTask) -> None:
        with contextlib.suppress(RuntimeError), self.session() as s:
            with s.begin_nested():
                s.add(Mark(label="in a savepoint"))
            raise RuntimeError("the transaction is rolled back")
        with self.session() as s:
            s.add(Mark(label="committed"))

    assert task.apply().successful()
    assert marks(app) == ["committed"]
    keys = database.models.IdempotencyKey
    with database.session() as s:
        assert s.scalars(select(keys.state).where(keys.key == "saved")).all() == ["completed"]


def test_a_refused_commit_leaves_its_connection_clean_for_the_next_run(
    postgres_url: str,
) -> None:
    """After the fence check refused the commit, the transaction is rolled back and the
    pooled connection is clean: the next run on the same pool commits normally."""
    app = marks_app(postgres_url, "refused")
    database = database_for(app)
    refused: list[BaseException] = []
    drivers: list[Any] = []

    @app.task(base=GafferTask, bind=True, shared=False, name="t.refused")
    def task(self: GafferTask, steal: bool) -> None:
        with self.lease("refused", ttl=30):
            if steal:
                LeaseClient(database).acquire("refused", "thief", 30, steal=True)
            try:
                with self.session() as s:
                    s.add(Mark(label=f"steal={steal}"))
                    drivers.append(s.connection().connection.driver_connection)
            except FenceLost as exc:
                refused.append(exc)
                raise

    task.apply((True,))
    assert len(refused) == 1
    assert "no longer current" in str(refused[0])
    (driver,) = drivers  # back in the pool, after the refusal and the rollback
    assert driver.pgconn.pipeline_status == psycopg.pq.PipelineStatus.OFF
    assert driver.pgconn.transaction_status == psycopg.pq.TransactionStatus.IDLE
    assert not driver.closed
    LeaseClient(database).release(LeaseClient(database).acquire("refused", "x", 30, steal=True))
    task.apply((False,))
    assert marks(app) == ["steal=False"]
    app.close()


@pytest.mark.parametrize("refusal", ["stolen", "renewal found it lost"])
def test_a_refused_commit_of_a_session_only_closed_is_rolled_back_before_the_pool_has_it(
    pg_app: Celery, refusal: str
) -> None:
    """A fenced session closed without a rollback after its commit was refused (as
    ``run_batches`` does): the refused writes are rolled back at once, so that the next
    user of the pooled connection cannot commit them."""
    from celery_gaffer.fencing.context import current_run
    from celery_gaffer.fencing.sessions import fenced_sessions, run_info

    app = pg_app
    database = database_for(app)
    drivers: list[Any] = []

    @app.task(base=GafferTask, bind=True, shared=False, name="t.closed")
    def task(self: GafferTask) -> None:
        with self.lease("closed", ttl=30) as lease:
            if refusal == "stolen":
                LeaseClient(database).acquire("closed", "thief", 30, steal=True)
            else:
                lease.lost = True
            run = current_run.get()
            assert run is not None
            factory = fenced_sessions(database.engine)
            with factory(info=run_info(run)) as session:
                session.add(Mark(label="refused"))
                session.flush()
                drivers.append(session.connection().connection.driver_connection)
                with pytest.raises(FenceLost):
                    session.commit()

    task.apply()
    (driver,) = drivers
    assert driver.pgconn.transaction_status == psycopg.pq.TransactionStatus.IDLE
    assert driver.pgconn.pipeline_status == psycopg.pq.PipelineStatus.OFF
    for _ in range(8):  # every pooled connection commits once
        with database.engine.begin() as conn:
            conn.execute(text("SELECT 1"))
    assert marks(app) == []


def test_a_lean_statement_on_a_dead_connection_is_raised_and_invalidated_as_sqlalchemy_does(
    postgres_url: str,
) -> None:
    """A lease statement whose connection the server closed fails as SQLAlchemy's
    OperationalError (connection invalidated), and the next one reconnects."""
    app = Celery("dead", broker="memory://", set_as_current=False)
    app.conf.gaffer_database_url = postgres_url
    database = database_for(app)
    client = LeaseClient(database)
    client.release(client.acquire("dead", "me", 30))  # a lease connection is now held idle
    with database.leases() as conn:
        pid = conn.execute(text("SELECT pg_backend_pid()")).scalar()
    with database.engine.connect() as killer:
        killer.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": pid})
    with pytest.raises((OperationalError, DatabaseUnavailable)) as failed:
        client.acquire("dead", "me", 30)
    error = failed.value
    cause = error.__cause__ if isinstance(error, DatabaseUnavailable) else error
    assert isinstance(cause, OperationalError)
    assert cause.connection_invalidated
    assert client.acquire("dead", "me", 30).token >= 1  # a fresh connection
    app.close()


def test_a_fenced_session_whose_connection_dies_fails_as_a_lost_connection(
    pg_app: Celery,
) -> None:
    """The server ends the session's connection before its writes are flushed: the run
    fails with SQLAlchemy's OperationalError (connection invalidated), which a worker
    retries as a database outage; the rollback after it must not touch the dead
    connection (reading its ``info`` would reconnect or raise PendingRollbackError)."""
    app = pg_app
    database = database_for(app)
    killed: list[int] = []

    @app.task(base=GafferTask, bind=True, shared=False, gaffer_key="dies:{n}", name="t.dies")
    def task(self: GafferTask, n: int) -> None:
        with self.lease("dies", ttl=30), self.session() as s:
            pid = s.execute(text("SELECT pg_backend_pid()")).scalar()
            with database.engine.connect() as killer:
                killer.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": pid})
            killed.append(int(pid))
            s.add(Mark(label="never"))

    result = task.apply((1,))
    assert killed
    error = result.result
    assert isinstance(error, OperationalError), repr(error)
    assert error.connection_invalidated
    assert marks(app) == []


def test_fenced_sessions_leave_the_engine_and_its_dialect_as_they_were(pg_app: Celery) -> None:
    """The dialect keeps its own commit and rollback (nothing patched); the engine gets
    one ``commit`` listener, once, which seals only the commits planned for it: a plain
    commit on the same engine runs no seal."""
    app = pg_app
    sent: list[str] = []

    @app.task(base=GafferTask, bind=True, shared=False, name="t.lean", gaffer_key="lean")
    def task(self: GafferTask, label: str) -> None:
        with self.session() as s:
            s.add(Mark(label=label))

    engine = database_for(app).engine
    event.listen(engine, "before_cursor_execute", lambda *args: sent.append(args[2]))
    assert task.apply(("sealed",)).successful()
    assert task.apply(("again",), task_id="second").successful()  # a duplicate: no commit
    with Session(engine) as session, session.begin():
        session.add(Mark(label="plain"))
    assert marks(app) == ["sealed", "plain"]
    assert "do_commit" not in vars(engine.dialect)
    assert "do_rollback" not in vars(engine.dialect)
    assert len(engine.dispatch.commit) == 1
    for name in ("rollback", "begin"):
        assert not getattr(engine.dispatch, name), name
    assert len([statement for statement in sent if "gaffer_seal(" in statement]) == 1


@pytest.mark.parametrize("ends", ["commit", "rollback"])
def test_a_core_block_that_ends_its_transaction_itself_is_refused_and_writes_nothing(
    app: Celery, ends: str
) -> None:
    """``self.connection()`` commits, sealed, when its block ends: a commit inside the
    block is refused (it could not be sealed), and so is a block that rolled back itself;
    the key stays unclaimed, so a later delivery still does the work."""
    database = database_for(app)
    drivers: list[Any] = []
    table = Mark.__table__

    @app.task(base=GafferTask, bind=True, shared=False, gaffer_key="core", name="t.core")
    def task(self: GafferTask) -> None:
        with self.connection() as conn:
            conn.execute(table.insert().values(label="inside"))
            drivers.append(conn.connection.driver_connection)
            getattr(conn, ends)()

    result = task.apply()
    assert isinstance(result.result, GafferError), result.result
    assert "self.connection()" in str(result.result)
    assert marks(app) == []
    with database.read() as conn:
        assert key_state(conn, database.models, "core") is None
    (driver,) = drivers
    if database.engine.dialect.name == "sqlite":
        assert not driver.in_transaction
    else:
        assert driver.pgconn.transaction_status == psycopg.pq.TransactionStatus.IDLE


def test_a_refused_sqlite_commit_leaves_no_transaction_open_for_the_pool(
    sqlite_url: str,
) -> None:
    """On SQLite the seal's refusal comes from SQLAlchemy's commit event, before the
    COMMIT: a session only closed after it (as ``run_batches`` does) still hands the pool
    a connection with no transaction open."""
    from celery_gaffer.fencing.context import current_run
    from celery_gaffer.fencing.sessions import fenced_sessions, run_info

    app = marks_app(sqlite_url, "fenced-commit-sqlite")
    database = database_for(app)
    drivers: list[Any] = []

    @app.task(base=GafferTask, bind=True, shared=False, name="t.sqlite_refused")
    def task(self: GafferTask) -> None:
        with self.lease("sqlite-refused", ttl=30):
            LeaseClient(database).acquire("sqlite-refused", "thief", 30, steal=True)
            run = current_run.get()
            assert run is not None
            with fenced_sessions(database.engine)(info=run_info(run)) as session:
                session.add(Mark(label="refused"))
                session.flush()
                drivers.append(session.connection().connection.driver_connection)
                with pytest.raises(FenceLost):
                    session.commit()
                # Rolled back at the refusal: the database's write lock is free at once.
                assert not drivers[0].in_transaction

    result = task.apply()
    assert result.successful(), result.result
    assert marks(app) == []
    app.close()
