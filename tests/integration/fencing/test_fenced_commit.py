"""The fenced commit in one round trip, and Gaffer's own statements on the driver's
connection (``celery_gaffer.store.fastpath``), on real PostgreSQL (and SQLite where the
claim is about both)."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any, cast

import psycopg
import pytest
from celery import Celery
from sqlalchemy import event, select, text
from sqlalchemy.exc import DBAPIError, OperationalError
from sqlalchemy.orm import Session
from sqlalchemy.pool import QueuePool

from celery_gaffer import FenceLost, GafferTask
from celery_gaffer.exceptions import DatabaseUnavailable
from celery_gaffer.fencing.leases import LeaseClient
from celery_gaffer.store import database_for, fastpath
from celery_gaffer.store.leases import FENCE_LOST_SQLSTATE, fence_guard

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


def test_a_takeover_while_the_commit_is_prepared_rejects_the_whole_commit(pg_app: Celery) -> None:
    """The check runs with the COMMIT itself, after every flush of the commit: a lease
    taken over by another holder after Gaffer's ``before_commit`` listener ran (here by
    a later listener, which also adds a row) still rejects every write of the commit."""
    app = pg_app
    database = database_for(app)
    errors: list[BaseException] = []

    @app.task(base=GafferTask, bind=True, shared=False, name="t.late")
    def task(self: GafferTask) -> None:
        with self.lease("late", ttl=30):
            try:
                with self.session() as s:
                    s.add(Mark(label="written under the lease"))

                    @event.listens_for(s, "before_commit")
                    def late(session: Session) -> None:  # runs after Gaffer's listener
                        LeaseClient(database).acquire("late", "thief", 30, steal=True)
                        session.add(Mark(label="flushed after the takeover"))

            except FenceLost as exc:
                errors.append(exc)
                raise

    task.apply()
    assert marks(app) == []
    assert len(errors) == 1


def test_a_stale_fence_rolls_back_a_savepoint_and_its_transaction(app: Celery) -> None:
    def body(self: GafferTask, s: Session) -> None:
        s.add(Mark(label="outer"))
        with s.begin_nested():
            s.add(Mark(label="nested"))

    worker, stolen = stale_run(app, "nested", body)
    stolen.set()
    worker.join(30)
    assert marks(app) == ["before"]


def test_a_refused_commit_leaves_its_connection_clean_for_the_next_run(
    postgres_url: str,
) -> None:
    """After a guard refused the commit (the server skipped the COMMIT), the transaction
    is rolled back and the pooled connection leaves pipeline mode: the next run on the
    same pool commits normally."""
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
    assert isinstance(refused[0].__cause__, DBAPIError)
    assert refused[0].__cause__.orig.sqlstate == FENCE_LOST_SQLSTATE  # type: ignore[union-attr]
    (driver,) = drivers  # back in the pool, after the refusal and the rollback
    assert driver.pgconn.pipeline_status == psycopg.pq.PipelineStatus.OFF
    assert driver.pgconn.transaction_status == psycopg.pq.TransactionStatus.IDLE
    assert not driver.closed
    LeaseClient(database).release(LeaseClient(database).acquire("refused", "x", 30, steal=True))
    task.apply((False,))
    assert marks(app) == ["steal=False"]
    app.close()


def test_a_refusing_guard_makes_the_server_skip_the_commit_sent_with_it(
    postgres_url: str,
) -> None:
    """fastpath.commit: a failing guard makes the server skip the COMMIT sent with it."""
    app = marks_app(postgres_url, "guard")
    database = database_for(app)
    lease = LeaseClient(database).acquire("guarded", "me", 30)
    models = database.models
    with database.engine.connect() as conn:
        assert fastpath.pipelines(conn)
        conn.execute(text("INSERT INTO test_marks (label) VALUES ('under a stale fence')"))
        stale = fence_guard(models, "guarded", lease.token - 1, "me")
        with pytest.raises(DBAPIError) as refused:
            fastpath.commit(conn, [stale])
        assert refused.value.orig.sqlstate == FENCE_LOST_SQLSTATE  # type: ignore[union-attr]
        conn.rollback()
        conn.execute(text("INSERT INTO test_marks (label) VALUES ('under the fence')"))
        fastpath.commit(conn, [fence_guard(models, "guarded", lease.token, "me")])
        conn.commit()  # SQLAlchemy's own: nothing is left for it to send
        labels = conn.execute(text("SELECT label FROM test_marks ORDER BY id")).scalars().all()
    assert labels == ["under the fence"]
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


def test_a_seal_left_by_a_commit_that_did_not_happen_is_forgotten(pg_app: Celery) -> None:
    """Gaffer's ``before_commit`` leaves the seal on the connection for the COMMIT; a later
    listener that stops the commit makes SQLAlchemy roll back instead, and the seal goes
    (the rollback and the pool's checkin take it off the connection): the connection's
    next transaction, not a run's, commits without it."""
    app = pg_app
    database = database_for(app)
    drivers: list[Any] = []

    @app.task(base=GafferTask, bind=True, shared=False, name="t.stopped", gaffer_key="stopped")
    def task(self: GafferTask) -> None:
        with self.session() as s:
            s.add(Mark(label="never committed"))
            drivers.append(s.connection().connection.driver_connection)

            @event.listens_for(s, "before_commit")
            def stop(session: Session) -> None:  # runs after Gaffer's listener
                raise RuntimeError("stopped before the COMMIT")

    assert task.apply().failed()
    engine, pool = database.engine, cast(QueuePool, database.engine.pool)
    with contextlib.ExitStack() as held:  # every idle connection of the pool, to find it
        idle = [held.enter_context(engine.connect()) for _ in range(pool.checkedin())]
        (conn,) = [c for c in idle if c.connection.driver_connection is drivers[0]]
        assert "gaffer_seal" not in conn.info
        conn.execute(text("INSERT INTO test_marks (label) VALUES ('plain')"))
        conn.commit()
    assert marks(app) == ["plain"]
    keys = database.models.IdempotencyKey
    with database.session() as s:  # the key was never claimed
        assert s.scalars(select(keys.state).where(keys.key == "stopped")).all() == []


def test_fenced_sessions_add_no_connection_events_to_their_engine(pg_app: Celery) -> None:
    """The seal goes with the COMMIT through the engine's dialect, not a listener for the
    engine's ``commit`` event: with one, SQLAlchemy would dispatch every connection event
    of the engine on every connection (about a fifth of a plain transaction's CPU)."""
    app = pg_app

    @app.task(base=GafferTask, bind=True, shared=False, name="t.lean", gaffer_key="lean")
    def task(self: GafferTask) -> None:
        with self.session() as s:
            s.add(Mark(label="sealed"))

    assert task.apply().successful()
    assert marks(app) == ["sealed"]
    engine = database_for(app).engine
    assert engine._has_events is False
