"""The fast path's SQL in libpq's form: numbered parameters, each name once, in order."""

from __future__ import annotations

from psycopg.adapt import PyFormat

from celery_gaffer.store.wire import WireSQL


def test_named_placeholders_become_numbered_parameters() -> None:
    wire = WireSQL("SELECT %(a)s, %(ids)b, %(a)s, %(t)t WHERE x LIKE '100%%'")
    assert wire.sql == b"SELECT $1, $2, $1, $3 WHERE x LIKE '100%'"
    assert wire.names == ("a", "ids", "t")
    assert wire.formats == (PyFormat.AUTO, PyFormat.BINARY, PyFormat.TEXT)


def test_sql_without_parameters_is_unchanged() -> None:
    wire = WireSQL("SELECT now()")
    assert (wire.sql, wire.names, wire.formats) == (b"SELECT now()", (), ())
