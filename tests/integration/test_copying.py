"""copy_rows against a real PostgreSQL server (COPY) and SQLite (its INSERT fallback)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from typing import Any

import psycopg
import pytest
from sqlalchemy import (
    JSON,
    Boolean,
    Column,
    DateTime,
    Engine,
    Float,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    func,
    select,
    text,
)
from sqlalchemy.dialects.postgresql import ENUM
from sqlalchemy.exc import IntegrityError, OperationalError

from celery_gaffer.exceptions import InvalidInput
from celery_gaffer.settings import parse_database_url
from celery_gaffer.store import get_engine
from celery_gaffer.store.copying import copies, copy_rows

COLUMNS = ("name", "label", "payload", "extra", "score", "count", "flag", "at")
AWKWARD = (
    'it\'s "quoted"',
    "back\\slash \\N \\\\ \\t",
    "tab\there",
    "new\nline and\r\ncarriage",
    "ünïcödé ✓ 東京 عربى 🦆",
    "",
    "\\.",
    "a,b;c|d",
)


def _table(metadata: MetaData, *extra: Column[Any]) -> Table:
    return Table(
        f"test_copying_{uuid.uuid4().hex[:8]}",
        metadata,
        Column("id", Integer, primary_key=True, autoincrement=True),
        Column("name", String(100), unique=True, nullable=False),
        Column("label", Text, nullable=True),
        Column("payload", JSON, nullable=True),
        Column("extra", JSON(none_as_null=True), nullable=True),
        Column("score", Float, nullable=True),
        Column("count", Integer, nullable=True),
        Column("flag", Boolean, nullable=True),
        Column("at", DateTime(timezone=True), nullable=True),
        *extra,
    )


@pytest.fixture
def engine(postgres_url: str) -> Engine:
    return get_engine(parse_database_url(postgres_url))


@pytest.fixture
def table(engine: Engine) -> Iterator[Table]:
    metadata = MetaData()
    made = _table(metadata)
    metadata.create_all(engine)
    try:
        yield made
    finally:
        metadata.drop_all(engine)


def _rows() -> list[tuple[Any, ...]]:
    shared = {"text": AWKWARD[0], "nested": {"list": [1, 2.5, None, True, AWKWARD[1]]}}
    at = datetime(2026, 3, 29, 1, 30, tzinfo=timezone(timedelta(hours=5, minutes=30)))
    rows: list[tuple[Any, ...]] = [
        (f"row-{i}", value, {"value": value, "shared": shared}, [value], 0.1 * i, i, i % 2 == 0, at)
        for i, value in enumerate(AWKWARD)
    ]
    rows.append(("shared-a", None, shared, shared, None, None, None, None))
    rows.append(("shared-b", "x", shared, {}, -0.0, -(2**31), False, at))
    rows.append(("empty", "y", [], {}, 1e300, 2**31 - 1, True, at))
    rows.append(("nones", None, None, None, None, None, None, None))
    return rows


def _read(engine: Engine, table: Table) -> list[tuple[Any, ...]]:
    with engine.connect() as conn:
        columns = [table.c[name] for name in COLUMNS]
        return [tuple(row) for row in conn.execute(select(*columns).order_by(table.c.id))]


def test_the_driver_is_psycopg_so_rows_are_copied(engine: Engine) -> None:
    with engine.connect() as conn:
        assert copies(conn)


def test_every_value_reads_back_exactly_as_an_insert_would_store_it(
    engine: Engine, table: Table
) -> None:
    rows = _rows()
    with engine.begin() as conn:
        copy_rows(conn, table, COLUMNS, rows)
    read = _read(engine, table)
    # A None in a plain JSON column is JSON null, which reads back as None; with
    # none_as_null it is SQL NULL: both as SQLAlchemy's own INSERT stores them.
    assert read == rows
    with engine.connect() as conn:
        nulls = conn.execute(
            select(
                table.c.payload.is_(None),
                table.c.extra.is_(None),
                func.json_typeof(table.c.payload),
            ).where(table.c.name == "nones")
        ).one()
    assert tuple(nulls) == (False, True, "null")


def test_a_repeated_key_raises_integrity_error_and_rollback_leaves_nothing(
    engine: Engine, table: Table
) -> None:
    with engine.begin() as conn:
        copy_rows(conn, table, COLUMNS, [("kept", "k", {}, {}, None, None, None, None)])
    rows = [(f"n{i}", "v", {}, {}, None, i, None, None) for i in range(100)]
    rows.append(("n7", "again", {}, {}, None, None, None, None))
    with pytest.raises(IntegrityError) as raised, engine.begin() as conn:
        copy_rows(conn, table, COLUMNS, rows)
    assert isinstance(raised.value.orig, psycopg.errors.UniqueViolation)
    # The statement names the table and columns; no value travels as SQL text.
    assert raised.value.statement is not None
    assert raised.value.statement.startswith(f"COPY {table.name} (name, label,")
    assert "again" not in raised.value.statement
    assert [row[0] for row in _read(engine, table)] == ["kept"]
    # The connection went back to the pool rolled back, and works.
    with engine.begin() as conn:
        copy_rows(conn, table, COLUMNS, rows[:3])
    assert [row[0] for row in _read(engine, table)] == ["kept", "n0", "n1", "n2"]


def test_a_value_psycopg_cannot_dump_is_a_clear_error_and_nothing_is_written(
    engine: Engine, table: Table
) -> None:
    naive = datetime(2026, 1, 1, 12, 0)  # a timezone-aware column
    rows = [
        ("ok", "v", {}, {}, None, None, None, None),
        ("bad", "v", {}, {}, None, None, None, naive),
    ]
    with pytest.raises(InvalidInput) as raised, engine.begin() as conn:
        copy_rows(conn, table, COLUMNS, rows)
    assert raised.value.field == table.name
    assert _read(engine, table) == []


def test_a_row_repeating_an_existing_key_fails_the_whole_transaction(
    engine: Engine, table: Table
) -> None:
    with engine.begin() as conn:
        copy_rows(conn, table, COLUMNS, [("taken", None, {}, {}, None, None, None, None)])
    with engine.connect() as conn:
        transaction = conn.begin()
        conn.execute(table.insert(), {"name": "written first", "payload": {}, "extra": {}})
        with pytest.raises(IntegrityError):
            copy_rows(conn, table, COLUMNS, [("taken", None, {}, {}, None, None, None, None)])
        transaction.rollback()
    assert [row[0] for row in _read(engine, table)] == ["taken"]


def test_a_connection_lost_mid_copy_is_invalidated(engine: Engine, table: Table) -> None:
    conn = engine.connect()
    try:
        pid = conn.execute(text("SELECT pg_backend_pid()")).scalar_one()
        with engine.connect() as other:
            other.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": pid})
        with pytest.raises(OperationalError) as raised:
            copy_rows(conn, table, COLUMNS, _rows())
        assert raised.value.connection_invalidated
        # Invalidated: closing it discards the dead connection instead of rolling back.
        assert conn.invalidated
    finally:
        conn.close()
    assert _read(engine, table) == []


def test_a_column_without_a_binary_dumper_is_copied_as_text(engine: Engine) -> None:
    mood = ENUM("calm", "it's odd", name=f"test_mood_{uuid.uuid4().hex[:8]}")
    metadata = MetaData()
    table = _table(metadata, Column("mood", mood, nullable=True))
    metadata.create_all(engine)
    try:
        rows = [(*row, "it's odd" if i % 2 else "calm") for i, row in enumerate(_rows())]
        with engine.begin() as conn:
            copy_rows(conn, table, (*COLUMNS, "mood"), rows)
        with engine.connect() as conn:
            read = [
                tuple(row)
                for row in conn.execute(
                    select(*[table.c[name] for name in (*COLUMNS, "mood")]).order_by(table.c.id)
                )
            ]
        assert read == rows
    finally:
        metadata.drop_all(engine)
        mood.drop(engine, checkfirst=True)


def test_sqlite_gets_the_same_rows_through_insert(sqlite_url: str) -> None:
    engine = get_engine(parse_database_url(sqlite_url))
    metadata = MetaData()
    table = _table(metadata)
    metadata.create_all(engine)
    rows = [(*row[:-1], None) for row in _rows()]  # SQLite keeps no offset
    with engine.begin() as conn:
        assert not copies(conn)
        copy_rows(conn, table, COLUMNS, rows)
    assert _read(engine, table) == rows
    with pytest.raises(IntegrityError), engine.begin() as conn:
        copy_rows(conn, table, COLUMNS, rows[:1])
    assert len(_read(engine, table)) == len(rows)
