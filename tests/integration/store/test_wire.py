"""Gaffer's statements on libpq's protocol, on real PostgreSQL: rows and counts as the
cursor gives them, BEGIN, statements and COMMIT in one round trip (read from libpq's
trace), psycopg's prepared statements kept in step (and forgotten with psycopg's), a
refused statement skipping the COMMIT, and a lost connection invalidated."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import datetime, timezone
from typing import Any

import pytest
from sqlalchemy import (
    BigInteger,
    Column,
    DateTime,
    Engine,
    MetaData,
    Table,
    bindparam,
    create_engine,
    func,
    insert,
    literal,
    select,
    text,
)
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError, OperationalError

from celery_gaffer.store import fastpath, later, wire
from celery_gaffer.store.engine import get_engine

from .test_begin import traced

META = MetaData()
PROBE = Table(
    "wire_probe",
    META,
    Column("id", BigInteger, primary_key=True),
    Column("at", DateTime(timezone=True)),
)
ADD = insert(PROBE).values(id=bindparam("id"), at=func.now()).returning(PROBE.c.id, PROBE.c.at)
COUNT = select(func.count()).select_from(PROBE).where(PROBE.c.id >= bindparam("low"))
DIVIDE = select(literal(1) / bindparam("by", type_=BigInteger))


@pytest.fixture
def engine(postgres_url: str) -> Iterator[Engine]:
    engine = get_engine(make_url(postgres_url))
    with engine.begin() as conn:
        META.create_all(conn)
        conn.execute(text("TRUNCATE wire_probe"))
    yield engine
    with engine.begin() as conn:
        META.drop_all(conn)


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many statements each call of wire.send carried (the path is really taken)."""
    calls: list[int] = []
    send = wire.send

    def counted(driver: Any, statements: Any, **kwargs: Any) -> Any:
        calls.append(len(statements))
        return send(driver, statements, **kwargs)

    monkeypatch.setattr(wire, "send", counted)
    return calls


@pytest.fixture(params=["wire", "cursor"])
def path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Each test twice: on the wire, and on psycopg's cursor (where the wire is unusable)."""
    if request.param == "cursor":
        monkeypatch.setattr(wire, "usable", lambda driver: False)
    return str(request.param)


def prepared(conn: Any) -> list[str]:
    driver = conn.connection.driver_connection
    rows = driver.execute("SELECT statement FROM pg_prepared_statements").fetchall()
    return [row[0] for row in rows]


def test_rows_and_counts_come_back_as_from_the_cursor(
    engine: Engine, path: str, sent: list[int]
) -> None:
    with engine.connect() as conn:
        before = datetime.now(timezone.utc)
        (row_id, at) = fastpath.execute(conn, ADD, {"id": 7}).one()
        assert row_id == 7
        assert isinstance(at, datetime)
        assert at.utcoffset() is not None
        assert abs((at - before).total_seconds()) < 60
        assert fastpath.execute(conn, COUNT, {"low": 0}).scalar() == 1
        assert fastpath.execute(conn, COUNT, {"low": 8}).scalar() == 0
        conn.commit()
    assert sent == ([1, 1, 1] if path == "wire" else [])


def test_begin_statements_and_commit_go_in_one_round_trip(engine: Engine, sent: list[int]) -> None:
    with engine.connect() as conn:

        def work() -> None:
            fastpath.commit(conn, [(ADD, {"id": 1}), (ADD, {"id": 2})])

        trips = traced(conn, work)
        conn.rollback()  # SQLAlchemy's view: nothing is left open
    assert len(trips) == 1, trips
    queries = [m for m in trips[0] if m.startswith(("Parse", "Bind"))]
    assert any("BEGIN" in m for m in queries), trips
    assert any("COMMIT" in m for m in queries), trips
    assert sent == [2]
    with engine.connect() as conn:
        assert conn.execute(select(func.count()).select_from(PROBE)).scalar() == 2


def test_a_refused_statement_skips_the_commit_and_the_writes_roll_back(
    engine: Engine, path: str
) -> None:
    with engine.connect() as conn:
        conn.execute(insert(PROBE).values(id=1))
        with pytest.raises(DBAPIError) as refused:
            fastpath.commit(conn, [(ADD, {"id": 2}), (DIVIDE, {"by": 0})])
        assert refused.value.orig.sqlstate == "22012"  # type: ignore[union-attr]
        conn.rollback()
        assert conn.execute(select(func.count()).select_from(PROBE)).scalar() == 0
        # The connection is as good as before.
        assert fastpath.execute(conn, DIVIDE, {"by": 1}).scalar() == 1


def test_a_statement_run_five_times_is_prepared_in_its_next_round_trip(engine: Engine) -> None:
    with engine.connect() as conn:
        for n in range(5):  # psycopg's prepare_threshold
            fastpath.execute(conn, COUNT, {"low": n})
        assert not any("wire_probe" in s for s in prepared(conn))
        trips = traced(conn, lambda: fastpath.execute(conn, COUNT, {"low": 5}))
        assert len(trips) == 1, trips  # Parse of the named statement, Bind, Execute, Sync
        assert any(m.startswith("Parse") and '"_pg3_' in m for m in trips[0]), trips
        assert any("wire_probe" in s for s in prepared(conn))
        trips = traced(conn, lambda: fastpath.execute(conn, COUNT, {"low": 6}))
        assert not any(m.startswith("Parse") for trip in trips for m in trip), trips
        conn.commit()


def test_statements_psycopg_deallocates_are_prepared_again(engine: Engine) -> None:
    with engine.connect() as conn:
        for n in range(6):  # prepared by now
            assert fastpath.execute(conn, COUNT, {"low": n}).scalar() == 0
        # psycopg prepares its own statement too; then its rollback deallocates them all.
        for _ in range(6):
            conn.execute(text("SELECT 1 FROM wire_probe WHERE id = :id"), {"id": 1})
        conn.rollback()
        assert prepared(conn) == []
        for n in range(6):  # neither refused as unknown nor left unprepared
            assert fastpath.execute(conn, COUNT, {"low": n}).scalar() == 0
        assert any("wire_probe" in s for s in prepared(conn))
        conn.commit()


def test_without_a_prepare_threshold_nothing_is_prepared(
    postgres_url: str, engine: Engine, sent: list[int]
) -> None:
    bouncer = create_engine(
        make_url(postgres_url).set(drivername="postgresql+psycopg"),
        connect_args={"prepare_threshold": None},
    )
    try:
        with bouncer.connect() as conn:
            for n in range(8):
                assert fastpath.execute(conn, COUNT, {"low": n}).scalar() == 0
            assert prepared(conn) == []
            conn.commit()
    finally:
        bouncer.dispose()
    assert sent == [1] * 8


@pytest.mark.parametrize("pipelined", [False, True])
def test_a_lost_connection_is_invalidated(engine: Engine, pipelined: bool) -> None:
    with engine.connect() as conn:
        pid = conn.connection.driver_connection.info.backend_pid  # type: ignore[union-attr]
        with engine.connect() as other:
            other.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": pid})
            other.commit()
        if pipelined:
            with pytest.raises(OperationalError) as lost:
                fastpath.commit(conn, [(ADD, {"id": 1})])
        else:
            with pytest.raises(OperationalError) as lost:
                fastpath.execute(conn, COUNT, {"low": 0})
        assert lost.value.connection_invalidated
    with engine.connect() as conn:  # the pool hands out a live connection
        assert fastpath.execute(conn, COUNT, {"low": 0}).scalar() == 0
        conn.commit()


PUT = insert(PROBE).values(id=bindparam("id"))


def committed_rows(engine: Engine) -> int:
    """The rows another connection sees (committed ones)."""
    with engine.connect() as other:
        return int(other.execute(select(func.count()).select_from(PROBE)).scalar_one())


def test_committing_commits_on_the_server_while_the_block_runs(engine: Engine, path: str) -> None:
    with engine.begin() as conn:
        conn.execute(insert(PROBE).values(id=1))
        with later.committing(conn, [(PUT, {"id": 2}), (PUT, {"id": 3})]) as committed:
            if path == "wire":
                # Sent on entry: the server commits without being waited for.
                deadline = time.monotonic() + 10
                while committed_rows(engine) < 3 and time.monotonic() < deadline:
                    time.sleep(0.01)
                assert committed_rows(engine) == 3
            else:
                assert committed_rows(engine) == 3  # committed on entry, as before
            committed()
            assert committed_rows(engine) == 3
            driver: Any = conn.connection.driver_connection
            assert driver.pgconn.pipeline_status == 0  # out of pipeline mode
        committed()  # once only: a second call does nothing
    assert committed_rows(engine) == 3


def test_committing_raises_a_refused_statement_and_commits_nothing(
    engine: Engine, path: str
) -> None:
    def refused_commit() -> None:
        with engine.begin() as conn:
            conn.execute(insert(PROBE).values(id=1))
            with later.committing(conn, [(PUT, {"id": 2}), (DIVIDE, {"by": 0})]) as done:
                done()

    with pytest.raises(DBAPIError) as refused:
        refused_commit()
    assert refused.value.orig.sqlstate == "22012"  # type: ignore[union-attr]
    assert committed_rows(engine) == 0
    with engine.begin() as conn:  # the pool's connections are as good as before
        assert fastpath.execute(conn, DIVIDE, {"by": 1}).scalar() == 1


def test_leaving_committing_without_waiting_invalidates_the_connection(engine: Engine) -> None:
    used: list[Any] = []

    def failed_block() -> None:
        with engine.begin() as conn:
            conn.execute(insert(PROBE).values(id=1))
            used.append(conn.connection.driver_connection)
            with later.committing(conn, [(PUT, {"id": 2})]):
                raise RuntimeError("publishing failed")

    with pytest.raises(RuntimeError, match="publishing failed"):
        failed_block()
    # Its answers were never read: closed (SQLAlchemy dropped it), so nobody reads them.
    assert used[0].closed
    with engine.begin() as other:
        assert fastpath.execute(other, DIVIDE, {"by": 1}).scalar() == 1
