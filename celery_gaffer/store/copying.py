"""Rows into a table with ``COPY ... FROM STDIN``, in the caller's SQLAlchemy transaction.

:func:`copy_rows` takes the values an ``insert(table)`` would take and, on PostgreSQL
with psycopg, streams them with psycopg's :meth:`~psycopg.Cursor.copy` on the driver
connection under the SQLAlchemy one (the transaction is the same). The statement names
only the table and its columns, quoted by the dialect; every value travels in COPY's
data stream, never as SQL text. The stream is in PostgreSQL's binary format, each value
dumped by psycopg for its column's type as the server reports it, so that neither side
formats or parses text; a column of a type psycopg cannot dump in binary makes the whole
copy use the text format. Elsewhere the rows are one executemany ``INSERT``.

Only public API: the driver connection is SQLAlchemy's documented
``conn.connection.driver_connection``, a psycopg error is wrapped with
:meth:`sqlalchemy.exc.DBAPIError.instance` (``IntegrityError`` for a repeated key, as a
statement run by SQLAlchemy would raise), and a connection the error left broken is
invalidated with :meth:`~sqlalchemy.engine.Connection.invalidate`. What SQLAlchemy's own
execution adds and this does not: its ``handle_error`` and ``before_cursor_execute``
events, its ``echo`` log, and the column types' own bind processing (values go as
psycopg adapts them: an aware datetime for a timezone-aware column, a dict or list for a
JSON one).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable, Sequence
from typing import Any

from sqlalchemy import JSON, Connection, Table, insert
from sqlalchemy.exc import DBAPIError

from ..exceptions import InvalidInput

# Each column's type as the server has it: the table's name is a value (a regclass).
_COLUMN_TYPES = (
    "SELECT attname, atttypid::int FROM pg_attribute"
    " WHERE attrelid = %s::regclass AND attnum > 0 AND NOT attisdropped"
)


def copies(conn: Connection) -> bool:
    """Whether :func:`copy_rows` streams with ``COPY`` on ``conn`` (psycopg)."""
    return conn.dialect.driver == "psycopg"


def copy_rows(
    conn: Connection, table: Table, columns: Sequence[str], rows: Iterable[Sequence[Any]]
) -> None:
    """Write ``rows`` (values in the order of ``columns``, as ``insert(table)`` takes
    them) into ``table``, in ``conn``'s transaction.

    A JSON column's values are serialised here, a container met again (the same object)
    once a call; a :class:`JSONText` is written as it is. A failure raises SQLAlchemy's
    exception (``IntegrityError`` for a repeated key), its ``orig`` psycopg's; the
    transaction is then failed, for the caller to roll back.
    """
    if not copies(conn):
        plain = [{name: decoded(v) for name, v in zip(columns, row, strict=True)} for row in rows]
        conn.execute(insert(table), plain)
        return
    import psycopg
    from psycopg.types.json import set_json_dumps

    preparer = conn.dialect.identifier_preparer
    target = preparer.format_table(table)
    names = ", ".join(preparer.quote(name) for name in columns)
    statement = f"COPY {target} ({names}) FROM STDIN"
    texts = []
    for at, name in enumerate(columns):
        column_type = table.c[name].type
        if isinstance(column_type, JSON):
            texts.append((at, _ColumnTexts(none_as_null=column_type.none_as_null)))
    driver: Any = conn.connection.driver_connection
    try:
        with driver.cursor() as cursor:
            # psycopg sends the texts made below as they are (and serialises any other
            # JSON value itself); a json column's take no Python call but the dump.
            set_json_dumps(_serialised, cursor)
            cursor.adapters.register_dumper(None, _json_text_dumper())
            oids = _binary_types(cursor, target, columns)
            if oids is not None:
                statement += " (FORMAT BINARY)"
            with cursor.copy(statement) as copy:
                if oids is not None:
                    copy.set_types(oids)
                write = copy.write_row
                for row in rows:
                    values = list(row)
                    for at, text in texts:
                        value = values[at]
                        if type(value) is not JSONText:
                            values[at] = text(value)
                    write(values)
    except psycopg.Error as exc:
        undumpable = exc.__context__
        if isinstance(undumpable, (TypeError, ValueError)):
            # psycopg before 3.2 ends a COPY cut short by a value it could not dump with
            # the server's error about the partial row: the value is the cause.
            if driver.broken or driver.closed:
                conn.invalidate()
            raise InvalidInput(
                f"a value COPY cannot write: {undumpable}", field=table.name
            ) from undumpable
        broken = bool(driver.broken or driver.closed)
        wrapped = DBAPIError.instance(
            statement, None, exc, psycopg.Error, connection_invalidated=broken, dialect=conn.dialect
        )
        if broken:
            conn.invalidate()
        raise wrapped from exc
    except (TypeError, ValueError) as exc:
        # A value psycopg cannot dump for its column (a naive datetime, say): the COPY
        # was ended with an error, and the transaction is failed for the caller.
        raise InvalidInput(f"a value COPY cannot write: {exc}", field=table.name) from exc


@functools.cache
def _json_text_dumper() -> type[Any]:
    """psycopg's dumper of a ``json`` column's values in binary ``COPY`` (by the column's
    oid, through ``set_types``): a :class:`JSONText` as its UTF-8 bytes."""
    import psycopg
    from psycopg.adapt import Dumper
    from psycopg.pq import Format

    class JSONTextDumper(Dumper):
        format = Format.BINARY
        oid = psycopg.adapters.types["json"].oid

        def dump(self, obj: Any) -> bytes:
            return (obj if type(obj) is JSONText else json.dumps(obj)).encode()

    return JSONTextDumper


def decoded(value: Any) -> Any:
    """``value``, or what it says when it is a :class:`JSONText` (for a plain insert)."""
    return json.loads(value) if type(value) is JSONText else value


def _binary_types(cursor: Any, target: str, columns: Sequence[str]) -> list[int] | None:
    """The type oids of ``columns`` when psycopg dumps each in binary, else None (then
    a column the table lacks is the text-format COPY's error to report)."""
    from psycopg import ProgrammingError
    from psycopg.pq import Format

    found = dict(cursor.execute(_COLUMN_TYPES, (target,)).fetchall())
    if not all(name in found for name in columns):
        return None
    oids = [found[name] for name in columns]
    try:
        for oid in oids:
            cursor.adapters.get_dumper_by_oid(oid, Format.BINARY)
    except ProgrammingError:
        return None
    return oids


class JSONText(str):
    """JSON text already made, for a JSON column: :func:`copy_rows` writes it as it is."""

    __slots__ = ()


def _serialised(value: Any) -> str:
    """psycopg's JSON serialisation on the copying cursor: text made here as it is."""
    return value if type(value) is JSONText else json.dumps(value)


class _ColumnTexts:
    """The JSON text of a JSON column's values, each container object serialised once
    (the rows of a bulk load share their timings' dicts)."""

    __slots__ = ("_null", "_seen")

    def __init__(self, *, none_as_null: bool) -> None:
        # SQLAlchemy stores None as JSON null, or as SQL NULL with ``none_as_null``.
        self._null = None if none_as_null else JSONText("null")
        # id() -> (the value, kept so that its id stays its own, and its text).
        self._seen: dict[int, tuple[Any, JSONText]] = {}

    def __call__(self, value: Any) -> JSONText | None:
        if value is None:
            return self._null
        kind = type(value)
        if kind is JSONText:
            return value  # type: ignore[no-any-return]
        if kind is dict or kind is list:
            if not value:
                return _EMPTY_OBJECT if kind is dict else _EMPTY_ARRAY
            found = self._seen.get(id(value))
            if found is not None:
                return found[1]
            text = JSONText(json.dumps(value))
            self._seen[id(value)] = (value, text)
            return text
        return JSONText(json.dumps(value))


_EMPTY_OBJECT = JSONText("{}")
_EMPTY_ARRAY = JSONText("[]")


__all__ = ["JSONText", "copies", "copy_rows", "decoded"]
