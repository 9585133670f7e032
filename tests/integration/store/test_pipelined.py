"""The commit that overlaps the caller's work (``store.pipelined.committing``), on real
PostgreSQL: it overlaps, it commits, and a failure is SQLAlchemy's with nothing committed."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from sqlalchemy import (
    Column,
    Engine,
    Integer,
    MetaData,
    Table,
    Text,
    cast,
    create_engine,
    func,
    select,
)
from sqlalchemy import update as sql_update
from sqlalchemy.exc import DBAPIError, IntegrityError

from celery_gaffer.store.pipelined import committing, pipelines

metadata = MetaData()
counters = Table(
    "gaffer_test_pipelined",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("value", Integer, nullable=False),
)


@pytest.fixture
def engine(postgres_url: str) -> Iterator[Engine]:
    engine = create_engine(postgres_url)
    metadata.drop_all(engine)
    metadata.create_all(engine)
    with engine.begin() as conn:
        conn.execute(counters.insert(), [{"id": 1, "value": 0}, {"id": 2, "value": 0}])
    yield engine
    metadata.drop_all(engine)
    engine.dispose()


def _values(engine: Engine) -> list[int]:
    with engine.connect() as conn:
        return list(conn.execute(select(counters.c.value).order_by(counters.c.id)).scalars())


def test_the_server_commits_while_the_caller_works(engine: Engine) -> None:
    slow = (
        sql_update(counters)
        .where(counters.c.id == 1)
        .values(value=counters.c.value + 1 + 0 * func.length(cast(func.pg_sleep(0.3), Text)))
    )
    with engine.connect() as conn:
        assert pipelines(conn)
        conn.execute(select(1))  # the transaction is open
        started = time.perf_counter()
        with committing(conn, [(slow, {})]) as committed:
            sent = time.perf_counter() - started
            assert committed.unread
            time.sleep(0.3)  # the caller's own work, while the server sleeps
            committed()
            assert not committed.unread
        total = time.perf_counter() - started
        assert not conn.in_transaction()
    assert sent < 0.2  # nothing waited for the server before the block
    assert total < 0.55  # 0.3 s + 0.3 s, overlapped
    assert _values(engine) == [1, 0]


def test_a_failing_statement_commits_nothing_and_raises_sqlalchemys_error(engine: Engine) -> None:
    first = sql_update(counters).where(counters.c.id == 1).values(value=5)
    clash = sql_update(counters).where(counters.c.id == 2).values(id=1)  # duplicate key
    with engine.connect() as conn:
        conn.execute(select(1))
        with pytest.raises(IntegrityError) as failed, committing(conn, [(first, {}), (clash, {})]):
            pass
        assert isinstance(failed.value, DBAPIError)
        conn.rollback()
        conn.execute(sql_update(counters).where(counters.c.id == 2).values(value=7))
        conn.commit()  # the connection is usable again
    assert _values(engine) == [0, 7]


def test_an_error_in_the_block_still_leaves_the_connection_usable(engine: Engine) -> None:
    bump = sql_update(counters).where(counters.c.id == 1).values(value=counters.c.value + 1)
    with engine.connect() as conn:
        conn.execute(select(1))
        with pytest.raises(RuntimeError), committing(conn, [(bump, {})]):
            raise RuntimeError("the caller failed while the commit was under way")
        conn.rollback()
        assert conn.execute(select(counters.c.value).where(counters.c.id == 1)).scalar() == 1


def test_without_pipelines_the_statements_commit_on_entry() -> None:
    engine = create_engine("sqlite://")
    metadata.create_all(engine)
    with engine.connect() as conn:
        conn.execute(counters.insert().values(id=1, value=0))
        assert not pipelines(conn)
        bump = sql_update(counters).where(counters.c.id == 1).values(value=3)
        with committing(conn, [(bump, {})]) as committed:
            assert not committed.unread
            assert not conn.in_transaction()
        assert conn.execute(select(counters.c.value)).scalar() == 3
    engine.dispose()
