"""The fast path: Gaffer's own hot statements on the driver's connection (psycopg).

A GafferTask run makes a handful of one-row statements of its own: the run's start and
end records, a lease's acquisition and release, the fence check with the key claim; a
Beat tick a few bulk ones per 1,000 fires (the due schedules, the ledger's insert and
updates), whose arrays psycopg sends in its binary format.
Through :meth:`Connection.execute` each costs about 70 µs of CPU in SQLAlchemy's
execution context and result objects, as much as psycopg and the round trip together.
:func:`execute` runs such a statement, built once and compiled once by SQLAlchemy with
bound parameters, on the psycopg connection under the SQLAlchemy one (on libpq's
protocol directly, :mod:`.wire`, sending the transaction's ``BEGIN`` with it when one is
to open), and returns its rows. The transaction is the SQLAlchemy connection's (the
driver connection is the same), so nothing changes but the cost.

Parameters get SQLAlchemy's bind processing, and returned values its result processing
(a UTC datetime column comes back an aware UTC datetime). Errors go through SQLAlchemy's
own handling (:meth:`Connection._handle_dbapi_exception`): the same wrapped exception
(``OperationalError`` with ``orig.sqlstate``), the same ``handle_error`` events, and a
lost connection invalidates the connection and the pool as it would have. On any other
driver, or for a statement that needs SQLAlchemy's execution context (Python-side column
defaults, expanding parameters, a returned type that must see the column to convert
it), :func:`execute` is
:meth:`Connection.execute`. These statements do not reach SQLAlchemy's ``echo`` log or
its ``before_cursor_execute`` events.

:func:`commit` sends statements and the transaction's ``COMMIT`` in one round trip
(libpq's pipeline mode): see :mod:`celery_gaffer.fencing.seal`. Where :mod:`.wire` cannot
be used (a libpq without pipeline mode, a psycopg without the parts it uses), psycopg's
cursor and pipeline do the same.

SQLAlchemy's ``Connection._handle_dbapi_exception`` is private API: the project's
dependency range stops below the next SQLAlchemy minor release, and the tests run on
the lowest and the newest versions it allows.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol

from sqlalchemy import ARRAY, Connection, Float
from sqlalchemy.sql.compiler import Compiled

from ..runtime import runtime
from . import wire


class Outcome(Protocol):
    """What callers read of a statement's result (a ``CursorResult`` is one too)."""

    @property
    def rowcount(self) -> int: ...

    def one(self) -> Any: ...

    def first(self) -> Any: ...

    def scalar(self) -> Any: ...

    def all(self) -> Sequence[Any]: ...


class Rows:
    """The rows of a statement run by :func:`execute`, read like a ``CursorResult``."""

    __slots__ = ("rowcount", "rows")

    def __init__(self, rows: Sequence[tuple[Any, ...]], rowcount: int) -> None:
        self.rows = rows
        self.rowcount = rowcount

    def one(self) -> tuple[Any, ...]:
        if len(self.rows) != 1:
            raise LookupError(f"expected one row, got {len(self.rows)}")
        return self.rows[0]

    def first(self) -> tuple[Any, ...] | None:
        return self.rows[0] if self.rows else None

    def scalar(self) -> Any:
        return self.rows[0][0] if self.rows else None

    def all(self) -> Sequence[tuple[Any, ...]]:
        return self.rows


class _Plan:
    """A statement compiled for one dialect: its SQL, and how to bind its parameters."""

    __slots__ = ("compiled", "processors", "results", "sql", "wire")

    def __init__(
        self,
        compiled: Compiled,
        processors: dict[str, Any],
        arrays: Sequence[str] = (),
        results: Sequence[Any] = (),
    ) -> None:
        self.compiled: Any = compiled
        sql = str(compiled)
        # Arrays go in psycopg's binary format: its text format quotes each element in
        # Python (about 5 µs an element), the binary one packs it (under 1 µs).
        for name in arrays:
            sql = sql.replace(f"%({name})s", f"%({name})b")
        self.sql = sql
        self.wire = wire.WireSQL(sql) if compiled.dialect.driver == "psycopg" else None
        self.processors = processors  # parameter name -> SQLAlchemy's conversion of it
        # SQLAlchemy's conversion of each returned column (None: none), when any has one.
        self.results = list(results) if any(p is not None for p in results) else None

    def convert(self, rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
        """``rows`` with each value converted as SQLAlchemy would have."""
        if self.results is None:
            return rows
        processors = self.results
        return [
            tuple(
                value if process is None else process(value)
                for process, value in zip(processors, row, strict=True)
            )
            for row in rows
        ]

    def bind(self, params: Mapping[str, Any]) -> dict[str, Any]:
        bound: dict[str, Any] = self.compiled.construct_params(dict(params))
        for name, process in self.processors.items():
            bound[name] = process(bound[name])
        return bound


class Plans(dict[tuple[int, type, Any, bool], tuple[Any, "_Plan | None"]]):
    """This process's plans: (id(statement), the dialect's class and server version,
    whether its rows are read) -> (statement, its plan or None when it must go through
    SQLAlchemy). The statement is kept so that its id stays its own."""


def _plans() -> Plans:
    return runtime().part("plans", Plans)


#: Plans kept at most (Gaffer's statements are a few dozen, each built once).
MAX_PLANS = 256


def execute(conn: Connection, statement: Any, params: Mapping[str, Any]) -> Outcome:
    """Run ``statement`` (built once: pass the same object each time) with ``params``."""
    dialect = conn.dialect
    if dialect.driver != "psycopg":
        return conn.execute(statement, dict(params))
    plan = _plan_for(conn, statement, reading=True)
    if plan is None:
        return conn.execute(statement, dict(params))
    bound = plan.bind(params)
    driver: Any = conn.connection.driver_connection
    if plan.wire is not None and wire.usable(driver):
        try:
            ((rows, rowcount),) = wire.send(driver, [(plan.wire, bound)])
        except BaseException as exc:  # noqa: BLE001 - it re-raises, as SQLAlchemy does
            conn._handle_dbapi_exception(exc, plan.sql, bound, None, None)
        return Rows(plan.convert(rows), rowcount)
    cursor = None
    try:
        cursor = driver.cursor()
        cursor.execute(plan.sql, bound)
        rows = cursor.fetchall() if cursor.description is not None else []
        rowcount = cursor.rowcount
        cursor.close()
    except BaseException as exc:  # noqa: BLE001 - it re-raises, as SQLAlchemy does
        # Wrapped, evented and (on a lost connection) invalidated as SQLAlchemy would.
        conn._handle_dbapi_exception(exc, plan.sql, bound, cursor, None)
    return Rows(plan.convert(rows), rowcount)


def can_copy(conn: Connection) -> bool:
    """Whether :func:`copy_rows` can stream rows with ``COPY`` (PostgreSQL with psycopg)."""
    return conn.dialect.driver == "psycopg" and hasattr(conn, "_handle_dbapi_exception")


def copy_rows(
    conn: Connection, table: Any, columns: Sequence[str], rows: Iterable[Sequence[Any]]
) -> None:
    """Stream ``rows`` (values in the order of ``columns``) into ``table`` with ``COPY ...
    FROM STDIN``, in the caller's transaction.

    The statement names only the table and its columns (quoted by the dialect); every
    value travels in COPY's data stream, converted by psycopg as a bound parameter is,
    never as SQL text. A failure is wrapped as SQLAlchemy wraps any statement's
    (``IntegrityError`` for a repeated key).
    """
    preparer = conn.dialect.identifier_preparer
    names = ", ".join(preparer.quote(name) for name in columns)
    sql = f"COPY {preparer.format_table(table)} ({names}) FROM STDIN"
    driver: Any = conn.connection.driver_connection
    cursor = None
    try:
        cursor = driver.cursor()
        with cursor.copy(sql) as copy:
            for row in rows:
                copy.write_row(row)
        cursor.close()
    except BaseException as exc:  # noqa: BLE001 - it re-raises, as SQLAlchemy does
        conn._handle_dbapi_exception(exc, sql, {}, cursor, None)


def pipelines(conn: Connection) -> bool:
    """Whether :func:`commit` can send statements and the COMMIT in one round trip."""
    if conn.dialect.driver != "psycopg" or not hasattr(conn, "_handle_dbapi_exception"):
        return False
    global _pipeline_supported
    if _pipeline_supported is None:
        import psycopg

        _pipeline_supported = bool(psycopg.Pipeline.is_supported())
    return _pipeline_supported


_pipeline_supported: bool | None = None


def commit(conn: Connection, statements: Sequence[tuple[Any, Mapping[str, Any]]]) -> None:
    """Run ``statements`` and then COMMIT ``conn``'s transaction, in one round trip.

    libpq's pipeline mode sends them together. When a statement fails, the server
    skips everything after it, the COMMIT included: the error is raised as SQLAlchemy
    raises it (``exc.orig.sqlstate`` tells which), and the transaction, failed, is left
    for the caller to roll back. Only where :func:`pipelines` is true.
    """
    planned = []
    for statement, params in statements:
        plan = _plan_for(conn, statement, reading=False)
        if plan is None:
            conn.execute(statement, dict(params))  # needs SQLAlchemy: its own round trip
        else:
            planned.append((plan, plan.bind(params)))
    driver: Any = conn.connection.driver_connection
    if not planned and driver.pgconn.transaction_status == _IDLE:
        return  # no transaction was begun and nothing is to be written: nothing to send
    try:
        wired = [(plan.wire, bound) for plan, bound in planned if plan.wire is not None]
        if len(wired) == len(planned) and wire.usable(driver):
            wire.send(driver, wired, commit=True)
            return
        with driver.pipeline():  # one Sync, sent when the block ends
            for plan, bound in planned:
                driver.cursor().execute(plan.sql, bound)
            # As a statement: Connection.commit() would sync (a round trip) on its own.
            driver.cursor().execute("COMMIT")
    except BaseException as exc:  # noqa: BLE001 - it re-raises, as SQLAlchemy does
        sent = ";\n".join([plan.sql for plan, _ in planned] + ["COMMIT"])
        conn._handle_dbapi_exception(exc, sent, None, None, None)


def abandon(conn: Connection) -> None:
    """Roll back ``conn``'s transaction at the driver after a commit that failed inside
    SQLAlchemy's commit (SQLAlchemy then considers the transaction over and, on a plain
    close, would return the connection to the pool without rolling it back); invalidate
    the connection when that fails or it was left in pipeline mode."""
    if conn.closed or conn.invalidated:
        return
    try:
        driver: Any = conn.connection.driver_connection
        if driver.pgconn.pipeline_status != _PIPELINE_OFF:
            raise RuntimeError("the connection was left in pipeline mode")
        driver.rollback()
    except Exception:  # noqa: BLE001 - no way to tell its state: do not reuse it
        conn.invalidate()


_IDLE = 0  # psycopg.pq.TransactionStatus.IDLE
_PIPELINE_OFF = 0  # psycopg.pq.PipelineStatus.OFF


def _plan_for(conn: Connection, statement: Any, *, reading: bool) -> _Plan | None:
    """The cached plan of ``statement`` on ``conn``'s dialect (None: SQLAlchemy's path)."""
    dialect = conn.dialect
    found = _plans().get((id(statement), type(dialect), dialect.server_version_info, reading))
    return _plan(conn, statement, reading=reading) if found is None else found[1]


def _plan(conn: Connection, statement: Any, *, reading: bool) -> _Plan | None:
    dialect = conn.dialect
    plans = _plans()
    if len(plans) >= MAX_PLANS:
        return None  # statements built anew each time: SQLAlchemy's path, uncached here
    compiled: Any = statement.compile(dialect=dialect)
    plan: _Plan | None = None
    # Values SQLAlchemy computes or renders at execution time (Python-side column
    # defaults, expanding IN lists) need its execution context: keep its path for those.
    computed = (
        compiled.insert_prefetch
        or compiled.update_prefetch
        or compiled.post_compile_params
        or compiled.literal_execute_params
    )
    if not computed and hasattr(conn, "_handle_dbapi_exception"):
        processors: dict[str, Any] = {}
        arrays: list[str] = []
        for bind, name in compiled.bind_names.items():
            escaped = compiled.escaped_bind_names.get(name, name)
            if isinstance(bind.type, ARRAY) and _plain(bind.type.item_type, dialect):
                arrays.append(escaped)  # lists of values psycopg dumps as they are
                continue
            process = bind.type.dialect_impl(dialect).bind_processor(dialect)
            if process is not None:
                processors[escaped] = process
        results = _result_processors(statement, dialect) if reading else []
        if results is not None:
            plan = _Plan(compiled, processors, arrays, results)
    with runtime().lock:
        plans[(id(statement), type(dialect), dialect.server_version_info, reading)] = (
            statement,
            plan,
        )
    return plan


def _plain(item_type: Any, dialect: Any) -> bool:
    """Whether SQLAlchemy leaves values of ``item_type`` to the driver as they are."""
    return item_type.dialect_impl(dialect).bind_processor(dialect) is None


def _result_processors(statement: Any, dialect: Any) -> list[Any] | None:
    """SQLAlchemy's conversion of each value ``statement`` returns (None: no conversion
    of that column), or None when a type cannot tell without seeing the column (keep
    SQLAlchemy's path)."""
    processors = []
    for column in getattr(statement, "exported_columns", None) or []:
        # A float column is PostgreSQL's double precision, which psycopg reads as a float.
        coltype = _FLOAT8 if isinstance(column.type, Float) else None
        try:
            processors.append(column.type.dialect_impl(dialect).result_processor(dialect, coltype))
        except Exception:  # noqa: BLE001 - a type that needs to see the column
            return None
    return processors


_FLOAT8 = 701  # the type oid of double precision
