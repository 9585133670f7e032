"""A transaction's ``BEGIN`` sent with its first statement, in one round trip (psycopg).

psycopg opens a transaction by sending ``BEGIN`` and waiting for its answer before the
first statement (in its pipeline mode too): a round trip of its own, as long as the
statement's. On the engine of :func:`~celery_gaffer.store.engine.get_engine` that runs
transactions (a GafferTask's :meth:`~celery_gaffer.GafferTask.session`, Beat's ledger
writes), :func:`send_begin_with_first_statement` makes the first statement of each
transaction that SQLAlchemy executes carry its ``BEGIN`` (with the connection's isolation
level and read-only setting, psycopg's own command) in one pipeline: one round trip
instead of two. Nothing else changes: the transaction, its errors (wrapped by SQLAlchemy
as before; a failed statement leaves the transaction failed, to roll back) and every
later statement are as they were. A server-side cursor, a ``COPY``, a statement without
parameters (SQLAlchemy's ``no_parameters``), a connection in autocommit mode or already
in a transaction, and statements sent on the driver connection directly take psycopg's
own path.

psycopg has no public way to send the ``BEGIN`` itself: for that one pipeline the
connection is marked autocommit (so that psycopg adds no ``BEGIN`` of its own) through its
private ``_autocommit`` flag, which the public setter refuses to clear inside a
transaction, and the command is psycopg's private ``_get_tx_start_command()``. Both are
in every psycopg 3 release the project allows (the tests run on the lowest and the
newest); a psycopg without them keeps its own ``BEGIN``.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Engine, event

from .wire import begins_in_pipeline

_IDLE = 0  # psycopg.pq.TransactionStatus.IDLE
_PIPELINE_OFF = 0  # psycopg.pq.PipelineStatus.OFF


def send_begin_with_first_statement(engine: Engine) -> bool:
    """Have ``engine`` (PostgreSQL with psycopg) send each transaction's ``BEGIN`` with
    its first statement; False when this psycopg or its libpq cannot."""
    if not begins_in_pipeline():
        return False
    if not event.contains(engine, "do_execute", _execute_with_begin):
        event.listen(engine, "do_execute", _execute_with_begin)
    return True


def _execute_with_begin(cursor: Any, statement: str, parameters: Any, _context: Any) -> bool:
    """The dialect's ``do_execute`` event: True when it executed the statement."""
    import psycopg

    driver = cursor.connection
    pgconn = driver.pgconn
    if (
        getattr(driver, "_autocommit", True)  # (a psycopg without the flag: its own path)
        or pgconn.transaction_status != _IDLE
        or pgconn.pipeline_status != _PIPELINE_OFF
        or isinstance(cursor, psycopg.ServerCursor)
        or statement.lstrip()[:4].upper() == "COPY"
    ):
        return False
    begin = driver._get_tx_start_command()
    driver._autocommit = True
    try:
        with driver.pipeline():  # one Sync, sent when the block ends
            driver.cursor().execute(begin)
            cursor.execute(statement, parameters)
    finally:
        driver._autocommit = False
    return True
