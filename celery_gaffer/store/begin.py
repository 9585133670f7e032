"""A transaction's ``BEGIN`` sent with its first statement, in one round trip (psycopg).

psycopg opens a transaction by sending ``BEGIN`` and waiting for its answer before the
first statement (in its pipeline mode too): a round trip of its own, as long as the
statement's. On the engine of :func:`~celery_gaffer.store.engine.get_engine` that runs
transactions (a GafferTask's :meth:`~celery_gaffer.GafferTask.session`, Beat's ledger
writes), :func:`send_begin_with_first_statement` makes the first statement of each
transaction that SQLAlchemy executes carry its ``BEGIN`` (with the connection's isolation
level and read-only setting, psycopg's own command): one round trip instead of two.
Nothing else changes: the transaction, its errors (wrapped by SQLAlchemy as before; a
failed statement leaves the transaction failed, to roll back) and every later statement
are as they were. A server-side cursor, a ``COPY``, a statement without parameters (psycopg
sends it as a simple query, which may hold several statements), one with more parameters
than libpq takes, a connection in
autocommit mode or already in a transaction, and statements sent on the driver
connection directly take psycopg's own path.

The two go on libpq's protocol (:func:`~celery_gaffer.store.wire.begin_and_execute`), and
the statement's results are handed to SQLAlchemy's psycopg cursor as its ``execute``
would leave them. That takes the cursor's private steps (its reset, query conversion,
result checks and selection), the same in every psycopg 3 release the project allows (the
tests run on the lowest and the newest); a psycopg without them keeps its own ``BEGIN``.
psycopg's pipeline object did the same (with its private autocommit flag to keep its own
``BEGIN`` out) for some 70,000 instructions more a transaction.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Engine, event

from . import wire

_IDLE = 0  # psycopg.pq.TransactionStatus.IDLE
_PIPELINE_OFF = 0  # psycopg.pq.PipelineStatus.OFF
_TEXT = 0  # psycopg.pq.Format.TEXT
_MAX_PARAMETERS = 65535  # libpq refuses more, before anything is sent
#: The psycopg cursor's private steps of an ``execute`` this module takes over.
_CURSOR_STEPS = ("_reset", "_convert_query", "_check_results", "_select_current_result")

_cursor_class: Any = None


def send_begin_with_first_statement(engine: Engine) -> bool:
    """Have ``engine`` (PostgreSQL with psycopg) send each transaction's ``BEGIN`` with
    its first statement; False when this psycopg or its libpq cannot."""
    global _cursor_class
    import psycopg

    if not wire.begins_in_pipeline() or not all(
        hasattr(psycopg.Cursor, step) for step in _CURSOR_STEPS
    ):
        return False
    _cursor_class = psycopg.Cursor
    if not event.contains(engine, "do_execute", _execute_with_begin):
        event.listen(engine, "do_execute", _execute_with_begin)
    return True


def _execute_with_begin(cursor: Any, statement: str, parameters: Any, _context: Any) -> bool:
    """The dialect's ``do_execute`` event: True when it executed the statement."""
    driver = cursor.connection
    pgconn = driver.pgconn
    if (
        type(cursor) is not _cursor_class  # a server-side or client-side binding cursor
        or cursor.closed
        or driver.autocommit
        or pgconn.transaction_status != _IDLE
        or pgconn.pipeline_status != _PIPELINE_OFF
        or not wire.usable(driver)
        or statement.lstrip()[:4].upper() == "COPY"
    ):
        return False
    # What the cursor's execute does before it sends (psycopg's _start_query).
    cursor._reset()
    if cursor._last_query is not statement:
        cursor._last_query = None
        cursor._tx = wire.psycopg_parts().Transformer(cursor)
    query = cursor._convert_query(statement, parameters)
    if not query.params and cursor.format == _TEXT:
        return False  # a simple query: psycopg's path (it may hold several statements)
    if query.params and len(query.params) > _MAX_PARAMETERS:
        return False  # refused by libpq: psycopg's own error, the connection kept
    cursor._query = query
    results = wire.begin_and_execute(driver, query, cursor.format)
    # And what it does with the results.
    cursor._check_results(results)
    cursor._results = results
    cursor._select_current_result(0)
    cursor._last_query = statement
    return True
