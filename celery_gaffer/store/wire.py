"""Gaffer's own statements sent on libpq's protocol directly (psycopg's ``pq`` layer).

Through ``cursor.execute`` a statement costs about 50 µs of psycopg's Python (cursor,
query conversion, result objects), and statements sent together in psycopg's pipeline
mode about 100 µs more (its pipeline keeps a queue of commands and one of results, each
a Python object): on a local network more CPU than the round trip they save. :func:`send`
does what those do for :mod:`.fastpath`'s statements with psycopg's own parts: its
adapters (a :class:`psycopg.adapt.Transformer` dumps the parameters and loads the rows,
exactly as a cursor would), its C generators that send and receive without blocking,
and its errors; the rest is libpq's API as psycopg exposes it (``PGconn``: extended
query protocol, prepared statements, pipeline mode). The statements, the transaction's
``BEGIN`` before them (when the connection is not in autocommit mode and no transaction
is open: psycopg's own start command, with the connection's isolation level) and, if
asked, its ``COMMIT`` after them go in one pipeline: one round trip.
:func:`begin_and_execute` does the same for a transaction's ``BEGIN`` and the first
statement SQLAlchemy sends in it, as psycopg's cursor converted it (:mod:`.begin`).
:func:`send_later` sends the same pipeline without waiting and reads its answers when
asked (:mod:`.later`: Beat's last statements and ``COMMIT`` run while it builds messages).

Prepared statements are psycopg's: its manager of the connection (private, as are the
transaction's start command and the pending-maintenance check; a psycopg without them
takes the cursor's path) counts each statement's executions and has it prepared when it
has run ``prepare_threshold`` times, here in the same round trip as that execution, so
that PostgreSQL parses and plans it once (unprepared, a run's start record and key claim
take a quarter more wall time). It forgets them when psycopg deallocates its statements
(a rollback, ``DISCARD ALL``); a connection whose ``prepare_threshold`` is None
(PgBouncer in transaction mode) prepares nothing.

A statement's SQL is converted once from the driver's ``%(name)s`` placeholders to
libpq's ``$1`` (:class:`WireSQL`); its values travel as bound parameters, never in the
SQL text.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

_PLACEHOLDER = re.compile(rb"%\(([^)]+)\)([sbt])|%%")
_COMMAND_OK = 1  # psycopg.pq.ExecStatus.COMMAND_OK
_TUPLES_OK = 2  # psycopg.pq.ExecStatus.TUPLES_OK
_FATAL_ERROR = 7  # psycopg.pq.ExecStatus.FATAL_ERROR
_PIPELINE_SYNC = 10  # psycopg.pq.ExecStatus.PIPELINE_SYNC
_TEXT = 0  # psycopg.pq.Format.TEXT
_IDLE = 0  # psycopg.pq.TransactionStatus.IDLE

_begins_in_pipeline: bool | None = None
_parts: Any = None


def psycopg_parts() -> Any:
    """The parts of psycopg this module (and :mod:`.begin`) use: imported on first use,
    not with Gaffer (SQLite needs no libpq), and kept, since an import inside a function
    costs a few µs each time it runs."""
    global _parts
    if _parts is None:
        from types import SimpleNamespace

        import psycopg
        from psycopg import generators
        from psycopg._preparing import Prepare
        from psycopg.adapt import Transformer

        _parts = SimpleNamespace(
            errors=psycopg.errors,
            ExecStatus=psycopg.pq.ExecStatus,
            Prepare=Prepare,
            Transformer=Transformer,
            execute=generators.execute,
            fetch_many=generators.fetch_many,
            flush=generators.send,
        )
    return _parts


def begins_in_pipeline() -> bool:
    """Whether this psycopg can send a transaction's ``BEGIN`` in a pipeline with other
    statements: its libpq has pipeline mode, and psycopg the start command of a
    transaction (private) to send."""
    global _begins_in_pipeline
    if _begins_in_pipeline is None:
        import psycopg

        _begins_in_pipeline = bool(psycopg.Pipeline.is_supported()) and hasattr(
            psycopg.Connection, "_get_tx_start_command"
        )
    return _begins_in_pipeline


def usable(driver: Any) -> bool:
    """Whether :func:`send` can run statements on the psycopg connection ``driver`` now:
    :func:`begins_in_pipeline`, psycopg's prepared statements manager is there, and no
    maintenance of it is pending (psycopg's next statement does that first)."""
    if not begins_in_pipeline() or driver.closed:
        return False
    manager = getattr(driver, "_prepared", None)
    pending = getattr(manager, "_to_flush", getattr(manager, "_maint_commands", None))
    return pending is not None and not pending


class _Query:
    """What psycopg's prepared statements manager reads of a query."""

    __slots__ = ("query", "types")

    def __init__(self, query: bytes, types: Any) -> None:
        self.query = query
        self.types = types


class WireSQL:
    """A statement's SQL in libpq's form: ``$n`` placeholders, and the parameter (and
    psycopg's format for it) that each one takes."""

    __slots__ = ("formats", "names", "sql")

    def __init__(self, sql: str) -> None:
        from psycopg.adapt import PyFormat

        names: list[str] = []
        formats: list[PyFormat] = []
        kinds = {b"s": PyFormat.AUTO, b"b": PyFormat.BINARY, b"t": PyFormat.TEXT}

        def number(match: re.Match[bytes]) -> bytes:
            if match.group(1) is None:
                return b"%"  # a literal percent sign
            name = match.group(1).decode()
            if name not in names:
                names.append(name)
                formats.append(kinds[match.group(2)])
            return b"$%d" % (names.index(name) + 1)

        self.sql = _PLACEHOLDER.sub(number, sql.encode())
        self.names = tuple(names)
        self.formats = tuple(formats)


def send(
    driver: Any, statements: Sequence[tuple[WireSQL, Mapping[str, Any]]], *, commit: bool = False
) -> list[tuple[list[tuple[Any, ...]], int]]:
    """Run ``statements`` (each with its parameters, by name) on the psycopg connection
    ``driver``, then ``COMMIT`` if asked, in one round trip; each statement's rows and
    row count.

    A failed statement raises psycopg's error for it (``sqlstate`` set); in a transaction
    the server then skips the rest, the ``COMMIT`` too, and the transaction is left
    failed for the caller to roll back. A connection that could not be read to the end
    (lost, interrupted) is closed, so that nobody reads its leftovers.
    """
    parts = psycopg_parts()
    sent, begin = _prepared(driver, statements)
    if len(sent) == 1 and not (begin or commit) and sent[0][1] is not parts.Prepare.SHOULD:
        query, _, name, tx, values = sent[0]
        pgconn = driver.pgconn
        with driver.lock:
            try:
                _send_one(pgconn, query, name, values, tx.formats)
                fetched = [driver.wait(parts.execute(pgconn))]
            except BaseException:
                driver.close()  # see _exchange
                raise
    else:
        fetched = _exchange(driver, begin, _wired(sent), commit)
    return _outcomes(driver, sent, begin, commit, fetched)


def send_later(
    driver: Any, statements: Sequence[tuple[WireSQL, Mapping[str, Any]]], *, commit: bool = False
) -> Callable[[], list[tuple[list[tuple[Any, ...]], int]]]:
    """:func:`send` in two halves: send ``statements`` (and the ``COMMIT`` if asked) now,
    without waiting; the function returned reads their outcomes (what :func:`send`
    returns or raises) when called, once.

    Meanwhile the server runs them and the caller does other work; nobody else may use
    ``driver`` until the function is called (whoever cannot call it closes ``driver``:
    its answers are unread).
    """
    sent, begin = _prepared(driver, statements)
    _submit(driver, begin, _wired(sent), commit)

    def outcomes() -> list[tuple[list[tuple[Any, ...]], int]]:
        return _outcomes(driver, sent, begin, commit, _collect(driver))

    return outcomes


def _prepared(
    driver: Any, statements: Sequence[tuple[WireSQL, Mapping[str, Any]]]
) -> tuple[list[tuple[Any, ...]], bytes | None]:
    """Each statement as sent (query, psycopg's prepare decision and name, its
    transformer, its dumped values), and the transaction's start command if one is to be
    sent first (None: autocommit, or a transaction is open)."""
    parts = psycopg_parts()
    manager = driver._prepared
    sent = []
    for wire, params in statements:
        tx = parts.Transformer(driver)
        values = tx.dump_sequence([params[name] for name in wire.names], wire.formats)
        query = _Query(wire.sql, tx.types)
        prep, name = manager.get(query)
        sent.append((query, prep, name, tx, values))
    begin = None
    if not driver.autocommit and driver.pgconn.transaction_status == _IDLE:
        begin = driver._get_tx_start_command()
    return sent, begin


def _wired(sent: Sequence[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    return [(q, p, n, v, tx.formats, _TEXT) for q, p, n, tx, v in sent]


def _outcomes(
    driver: Any,
    sent: Sequence[tuple[Any, ...]],
    begin: bytes | None,
    commit: bool,
    fetched: list[list[Any]],
) -> list[tuple[list[tuple[Any, ...]], int]]:
    """The results in the order sent. psycopg learns which statements are prepared now
    (not one whose preparation failed or was skipped); then the first error is raised."""
    parts = psycopg_parts()
    manager = driver._prepared
    groups = iter(fetched)
    checks: list[tuple[Any, list[Any]]] = []
    if begin is not None:
        checks.append((None, next(groups)))
    outcomes = []
    for query, prep, name, tx, _ in sent:
        if prep is parts.Prepare.SHOULD:
            prepared = next(groups)
            checks.append((None, prepared))
            if prepared[-1].status != _COMMAND_OK:
                checks.append((tx, next(groups)))
                continue
        results = next(groups)
        _cached(manager, query, prep, name, results)
        checks.append((tx, results))
    if commit:
        checks.append((None, next(groups)))
    for tx, results in checks:
        outcome = _outcome(driver, tx, results)
        if tx is not None:
            outcomes.append(outcome)
    return outcomes


def _cached(manager: Any, query: Any, prep: Any, name: bytes, results: list[Any]) -> None:
    """Tell psycopg's prepared statements manager of a statement's execution, as its
    cursor does (it counts executions, and prepares a statement run often)."""
    key = manager.maybe_add_to_cache(query, prep, name)
    if key is not None:
        manager.validate(key, prep, name, results)


def _send_one(
    pgconn: Any, query: Any, name: bytes, values: Any, formats: Any, result_format: int = 0
) -> None:
    if name:  # prepared, or being prepared in the same pipeline
        pgconn.send_query_prepared(name, values, param_formats=formats, result_format=result_format)
    else:
        pgconn.send_query_params(
            query.query,
            values,
            param_types=query.types,
            param_formats=formats,
            result_format=result_format,
        )


def _exchange(
    driver: Any, begin: bytes | None, sent: Sequence[tuple[Any, ...]], commit: bool
) -> list[list[Any]]:
    """Send ``begin`` (a transaction's start command, or None), each of ``sent`` (query,
    psycopg's prepare decision and name, values, their formats, the results' format) and
    ``COMMIT`` if asked in one pipeline; the results of each, in the order sent (a
    preparation's apart from its execution's)."""
    _submit(driver, begin, sent, commit)
    return _collect(driver)


def _submit(
    driver: Any, begin: bytes | None, sent: Sequence[tuple[Any, ...]], commit: bool
) -> None:
    """:func:`_exchange`'s first half: the pipeline sent, its answers not read."""
    parts = psycopg_parts()
    pgconn = driver.pgconn
    with driver.lock:
        try:
            pgconn.enter_pipeline_mode()
            if begin is not None:
                pgconn.send_query_params(begin, None)
            for query, prep, name, values, formats, result_format in sent:
                if prep is parts.Prepare.SHOULD:
                    pgconn.send_prepare(name, query.query, param_types=query.types)
                _send_one(pgconn, query, name, values, formats, result_format)
            if commit:
                pgconn.send_query_params(b"COMMIT", None)
            pgconn.pipeline_sync()
            driver.wait(parts.flush(pgconn))
        except BaseException:
            driver.close()  # see _collect
            raise


def _collect(driver: Any) -> list[list[Any]]:
    """:func:`_exchange`'s second half: the answers to the pipeline sent, read to its
    end (its sync); the connection leaves pipeline mode."""
    parts = psycopg_parts()
    pgconn = driver.pgconn
    fetched: list[list[Any]] = []
    with driver.lock:
        try:
            while True:
                results = driver.wait(parts.fetch_many(pgconn))
                if results and results[0].status == _PIPELINE_SYNC:
                    break
                fetched.append(results)
            pgconn.exit_pipeline_mode()
        except BaseException:
            # Lost, or interrupted (a time limit) before every answer was read: its state
            # is unknown, nobody uses it again (SQLAlchemy sees it closed and drops it).
            driver.close()
            raise
    return fetched


def begin_and_execute(driver: Any, query: Any, result_format: int) -> list[Any]:
    """Send the transaction's ``BEGIN`` (psycopg's start command, with the connection's
    isolation level) and ``query`` (a query as a psycopg cursor converts it: SQL, values,
    their types and formats) on the psycopg connection ``driver``, in one round trip; the
    statement's results, unchecked, after psycopg's prepared statements manager has
    learnt of its execution. A failed ``BEGIN`` or preparation raises its error."""
    manager = driver._prepared
    prep, name = manager.get(query, None)
    begin = driver._get_tx_start_command()
    sent = [(query, prep, name, query.params, query.formats, result_format)]
    groups = iter(_exchange(driver, begin, sent, commit=False))
    _outcome(driver, None, next(groups))
    if prep is psycopg_parts().Prepare.SHOULD:
        prepared = next(groups)
        if prepared[-1].status != _COMMAND_OK:
            _outcome(driver, None, prepared)  # the preparation's error
    results = next(groups)
    _cached(manager, query, prep, name, results)
    return results


def _outcome(driver: Any, tx: Any, results: list[Any]) -> tuple[list[tuple[Any, ...]], int]:
    """A statement's (rows, row count) from its results, or its error raised."""
    for result in results:
        if result.status == _FATAL_ERROR:
            errors = psycopg_parts().errors
            raise errors.error_from_result(result, encoding=driver.info.encoding)
    result = results[-1] if results else None
    if result is None or result.status not in (_COMMAND_OK, _TUPLES_OK):
        parts = psycopg_parts()
        status = "none" if result is None else parts.ExecStatus(result.status).name
        raise parts.errors.InternalError(f"unexpected result of a statement: {status}")
    rowcount = result.command_tuples or 0
    if tx is None or result.status != _TUPLES_OK:
        return [], rowcount
    tx.set_pgresult(result)
    return tx.load_rows(0, result.ntuples, tuple), rowcount
