"""A transaction's BEGIN sent with its first statement, on real PostgreSQL: one round trip
fewer (read from libpq's trace of the protocol), and transactions that behave exactly as
with psycopg's own BEGIN: rolled back, failed, isolated, read-only, autocommit."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import Connection, Engine, bindparam, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import IntegrityError, InternalError, OperationalError

from celery_gaffer.store.engine import get_engine


@pytest.fixture
def engine(postgres_url: str) -> Iterator[Engine]:
    engine = get_engine(make_url(postgres_url))
    with engine.begin() as conn:
        conn.execute(text("CREATE TABLE IF NOT EXISTS begin_probe (id int PRIMARY KEY)"))
        conn.execute(text("TRUNCATE begin_probe"))
    yield engine
    with engine.begin() as conn:
        conn.execute(text("DROP TABLE begin_probe"))


def traced(conn: Connection, work: Any) -> list[list[str]]:
    """Run ``work()`` with libpq tracing ``conn``; the frontend messages of each round
    trip (a run of messages sent before the server's answers to them)."""
    from psycopg import pq

    pgconn = conn.connection.driver_connection.pgconn  # type: ignore[union-attr]
    with tempfile.TemporaryFile("w+") as trace:
        pgconn.trace(trace.fileno())
        pgconn.set_trace_flags(pq.Trace.SUPPRESS_TIMESTAMPS | pq.Trace.REGRESS_MODE)
        try:
            work()
        finally:
            pgconn.untrace()
        trace.seek(0)
        lines = trace.read().splitlines()
    trips: list[list[str]] = []
    sending = False
    for line in lines:
        if line.count("\t") < 2:  # a statement's text runs on over several lines
            if sending:
                trips[-1][-1] += "\n" + line
            continue
        direction, _length, message = line.split("\t", 2)
        if direction != "F":
            sending = False
            continue
        if not sending:
            trips.append([])
            sending = True
        trips[-1].append(message)
    return trips


def count(conn: Connection) -> int:
    return int(conn.execute(text("SELECT count(*) FROM begin_probe")).scalar_one())


def test_the_first_statement_carries_the_begin_one_round_trip_fewer(engine: Engine) -> None:
    with engine.connect() as conn:
        for _ in range(10):  # as on a busy connection: psycopg has prepared both by now
            conn.execute(text("INSERT INTO begin_probe VALUES (:id)"), {"id": 0})
            conn.rollback()

        def work() -> None:
            conn.execute(text("INSERT INTO begin_probe VALUES (:id)"), {"id": 1})
            conn.execute(text("INSERT INTO begin_probe VALUES (:id)"), {"id": 2})
            conn.commit()

        trips = traced(conn, work)
    # BEGIN and the first INSERT together; the second INSERT; the COMMIT. (psycopg
    # prepares a statement it sent often: then only its Bind and Execute show.)
    assert len(trips) == 3, trips
    assert [message.startswith("Execute") for message in trips[0]].count(True) == 2
    assert [message.startswith("Execute") for message in trips[1]].count(True) == 1
    with engine.connect() as conn:
        assert count(conn) == 2


def test_a_rollback_undoes_the_first_statement(engine: Engine) -> None:
    with engine.connect() as conn:
        conn.execute(text("INSERT INTO begin_probe VALUES (:id)"), {"id": 1})
        conn.rollback()
        assert count(conn) == 0


def test_a_failed_first_statement_leaves_a_failed_transaction_to_roll_back(
    engine: Engine,
) -> None:
    with engine.begin() as conn:
        conn.execute(text("INSERT INTO begin_probe VALUES (:id)"), {"id": 1})
    with engine.connect() as conn:
        with pytest.raises(IntegrityError):
            conn.execute(text("INSERT INTO begin_probe VALUES (:id)"), {"id": 1})
        with pytest.raises(InternalError, match="current transaction is aborted"):
            conn.execute(text("SELECT :x"), {"x": 1})
        conn.rollback()
        conn.execute(text("INSERT INTO begin_probe VALUES (:id)"), {"id": 2})
        conn.commit()
        assert count(conn) == 2


def test_the_isolation_level_and_read_only_setting_begin_the_transaction(
    engine: Engine,
) -> None:
    with engine.connect() as conn:
        serializable = conn.execution_options(isolation_level="SERIALIZABLE")
        level = serializable.execute(
            text("SELECT current_setting(:name)"), {"name": "transaction_isolation"}
        )
        assert level.scalar_one() == "serializable"
        conn.rollback()
    with engine.connect() as conn:
        read_only = conn.execution_options(postgresql_readonly=True)
        with pytest.raises(InternalError, match="read-only transaction"):
            read_only.execute(text("INSERT INTO begin_probe VALUES (:id)"), {"id": 1})
        conn.rollback()


def test_autocommit_and_server_side_cursors_keep_psycopgs_own_path(engine: Engine) -> None:
    with engine.connect() as conn:
        auto = conn.execution_options(isolation_level="AUTOCOMMIT")
        auto.execute(text("INSERT INTO begin_probe VALUES (:id)"), {"id": 1})
        with engine.connect() as other:
            assert count(other) == 1  # committed by itself: no BEGIN was sent
    with engine.connect() as conn:
        streamed = conn.execution_options(stream_results=True, max_row_buffer=2)
        rows = streamed.execute(text("SELECT generate_series(1, :n)"), {"n": 5})
        assert [row[0] for row in rows] == [1, 2, 3, 4, 5]
        conn.rollback()


def test_the_first_statements_rows_and_counts_are_the_cursors(engine: Engine) -> None:
    with engine.connect() as conn:
        rows = conn.execute(
            text("SELECT n, n * 2 AS twice FROM generate_series(1, :n) n"), {"n": 3}
        )
        assert list(rows.keys()) == ["n", "twice"]
        assert [tuple(row) for row in rows] == [(1, 2), (2, 4), (3, 6)]
        conn.rollback()
        returned = conn.execute(
            text("INSERT INTO begin_probe VALUES (:a), (:b) RETURNING id"), {"a": 1, "b": 2}
        )
        assert sorted(returned.scalars()) == [1, 2]
        conn.commit()
        updated = conn.execute(text("UPDATE begin_probe SET id = id + 10 WHERE id > :n"), {"n": 0})
        assert updated.rowcount == 2
        conn.commit()
        assert count(conn) == 2


def test_several_statements_without_parameters_keep_psycopgs_simple_query(engine: Engine) -> None:
    """psycopg sends a statement without parameters as a simple query, which may hold
    several statements; a prepared one (and a pipeline) may not."""
    with engine.connect() as conn:
        conn.execute(text("INSERT INTO begin_probe VALUES (1); INSERT INTO begin_probe VALUES (2)"))
        conn.commit()
        assert count(conn) == 2


def test_the_first_statement_is_prepared_at_psycopgs_threshold(engine: Engine) -> None:
    def prepared(conn: Connection) -> list[str]:
        statements = conn.exec_driver_sql("SELECT statement FROM pg_prepared_statements")
        return [str(statement) for statement in statements.scalars()]

    insert = text("INSERT INTO begin_probe VALUES (:id)")
    with engine.connect() as conn:
        for n in range(5):  # psycopg's prepare_threshold (a rollback would forget them)
            conn.execute(insert, {"id": n})
            conn.commit()
        trips = traced(conn, lambda: conn.execute(insert, {"id": 5}))
        assert len(trips) == 1, trips  # BEGIN, Parse of the named statement, Bind, Execute
        assert any(m.startswith("Parse") and '"_pg3_' in m for m in trips[0]), trips
        assert any("begin_probe" in statement for statement in prepared(conn))
        conn.commit()
        trips = traced(conn, lambda: conn.execute(insert, {"id": 6}))
        assert not any(m.startswith("Parse") and "begin_probe" in m for m in trips[0]), trips
        conn.commit()
        assert count(conn) == 7


def test_a_lost_connection_on_the_first_statement_is_invalidated(engine: Engine) -> None:
    with engine.connect() as conn:
        pid = conn.connection.driver_connection.info.backend_pid  # type: ignore[union-attr]
        conn.rollback()
        with engine.connect() as other:
            other.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": pid})
            other.commit()
        with pytest.raises(OperationalError) as lost:
            conn.execute(text("INSERT INTO begin_probe VALUES (:id)"), {"id": 1})
        assert lost.value.connection_invalidated
    with engine.connect() as conn:  # the pool hands out a live connection
        assert count(conn) == 0


def test_a_statement_libpq_refuses_fails_without_losing_the_connection(engine: Engine) -> None:
    many = text("SELECT count(*) FROM begin_probe WHERE id IN :ids").bindparams(
        bindparam("ids", expanding=True)
    )
    with engine.connect() as conn:
        with pytest.raises(OperationalError, match="number of parameters") as refused:
            conn.execute(many, {"ids": list(range(70_000))})
        assert not refused.value.connection_invalidated
        conn.rollback()
        assert conn.execute(many, {"ids": list(range(10))}).scalar_one() == 0
        conn.commit()
