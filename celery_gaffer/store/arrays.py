"""Statements over many rows with a constant number of bound parameters on PostgreSQL.

A list of ids in ``IN (...)`` is one bound parameter per id, a new statement text for each
list length, and work per element in SQLAlchemy and the driver. On PostgreSQL the same
list is one array parameter instead (``= ANY(:ids)``), and many rows to write are one
array per column read back with ``unnest``: the statement text is fixed (cached by
SQLAlchemy, prepared by psycopg) and the driver sends each array in one piece. SQLite
keeps the plain forms (its statements are in-process calls, and it has no arrays).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from sqlalchemy import (
    BigInteger,
    ColumnElement,
    Connection,
    DateTime,
    Float,
    Integer,
    String,
    Text,
    any_,
    bindparam,
    cast,
    column,
    func,
    select,
    update,
)
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.orm import QueryableAttribute
from sqlalchemy.sql import Select
from sqlalchemy.sql.selectable import TableValuedAlias
from sqlalchemy.types import TypeEngine

from .prebuilt import prebuilt

# Element types of the arrays: enough for every column the ledger writes in bulk.
ELEMENT_TYPES: dict[str, TypeEngine[Any]] = {
    "bigint": BigInteger(),
    "int": Integer(),
    "str": String(),
    "text": Text(),
    "float": Float(),
    "datetime": DateTime(timezone=True),
}


def on_postgresql(conn: Connection) -> bool:
    return conn.dialect.name == "postgresql"


def array_param(name: str, element: str) -> ColumnElement[Any]:
    """``CAST(:name AS <element>[])``: one bound parameter holding a Python list."""
    array_type = ARRAY(ELEMENT_TYPES[element])
    return cast(bindparam(name, type_=array_type), array_type)


def any_of(column_: ColumnElement[Any], name: str, element: str) -> ColumnElement[bool]:
    """``column = ANY(CAST(:name AS <element>[]))`` (PostgreSQL only)."""
    return column_ == any_(array_param(name, element))


def matches(
    conn: Connection,
    column_: ColumnElement[Any] | QueryableAttribute[Any],
    values: Sequence[Any],
    element: str,
) -> ColumnElement[bool]:
    """``column`` is one of ``values``: an array on PostgreSQL, ``IN`` elsewhere.

    On PostgreSQL the list is bound here (a literal bound parameter, not rendered
    into the text), so the statement's text does not depend on how many values there are.
    """
    if on_postgresql(conn):
        array_type = ARRAY(ELEMENT_TYPES[element])
        return column_ == any_(cast(bindparam(None, list(values), type_=array_type), array_type))
    return column_.in_(list(values))


def unnest(columns: Sequence[tuple[str, str]], prefix: str = "b_") -> TableValuedAlias:
    """``unnest(:b_a, :b_b, ...) AS v(a, b, ...)``: one row per list index.

    ``columns`` is ``(name, element type)`` pairs; the parameters are ``prefix + name``.
    """
    return (
        func.unnest(*(array_param(prefix + name, element) for name, element in columns))
        .table_valued(*(column(name, ELEMENT_TYPES[element]) for name, element in columns))
        .render_derived(name="v")
    )


def unnest_select(columns: Sequence[tuple[str, str]], prefix: str = "b_") -> Select[Any]:
    """``SELECT v.a, v.b, ... FROM unnest(...) AS v(a, b, ...)``."""
    source = unnest(columns, prefix)
    return select(*(source.c[name] for name, _ in columns))


#: Rows per statement when a list of parameters is sent to the database.
UPDATE_CHUNK = 1000


def update_many(
    conn: Connection,
    table: Any,
    key: str,
    columns: Sequence[tuple[str, str]],
    rows: Sequence[Mapping[str, Any]],
    values: Callable[[Callable[[str], Any]], dict[str, Any]],
    *,
    name: str | None = None,
    later: list[tuple[Any, dict[str, Any]]] | None = None,
) -> None:
    """``UPDATE table SET ...`` for many rows, each matched on its column ``key``.

    ``columns``: ``(name, element type)`` of what each row holds (``key`` among them);
    ``values(value_of)``: the ``SET`` clause, where ``value_of(name)`` is the row's value.
    On PostgreSQL one ``UPDATE ... FROM unnest(...)`` per chunk (with a ``name``, the
    statement is built once for ``table``, :mod:`.prebuilt`);
    elsewhere one executemany per chunk (the values bound as the columns they set).
    ``later``: the named statements are appended to it with their values, not run (the
    caller runs them, with :func:`.pipelined.committing`, say).
    """
    if not rows:
        return
    if on_postgresql(conn):

        def build() -> Any:
            source = unnest(columns)
            return (
                update(table)
                .where(table.c[key] == source.c[key])
                .values(values(lambda column_name: source.c[column_name]))
            )

        stmt = build() if name is None else prebuilt((name, table.name), build)
        for start in range(0, len(rows), UPDATE_CHUNK):
            part = rows[start : start + UPDATE_CHUNK]
            arrays = {
                "b_" + column_name: [row[column_name] for row in part] for column_name, _ in columns
            }
            if name is None:
                conn.execute(stmt, arrays)
            elif later is not None:
                later.append((stmt, arrays))
            else:
                conn.execute(stmt, arrays)
        return
    stmt = (
        update(table)
        .where(table.c[key] == bindparam("b_" + key))
        .values(values(lambda name: bindparam("b_" + name)))
    )
    for start in range(0, len(rows), UPDATE_CHUNK):
        part = rows[start : start + UPDATE_CHUNK]
        conn.execute(stmt, [{"b_" + name: row[name] for name, _ in columns} for row in part])
