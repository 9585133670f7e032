"""A commit that overlaps the caller's work: psycopg's pipeline mode, public API only.

Beat's dispatch ends its transaction with the schedules' ``UPDATE`` and the ``COMMIT``,
statements whose only answer is "done". :func:`committing` sends them in psycopg's
pipeline mode (:meth:`psycopg.Connection.pipeline`) and lets the caller build its
messages while the server runs them; the caller waits for the answer before anything
that must follow the commit (the first message reaching the broker). The statements go
through SQLAlchemy's :meth:`~sqlalchemy.engine.Connection.execute` as any other; the
``COMMIT`` is sent as a statement of the pipeline, so that the server commits without
waiting for the pipeline's end, and SQLAlchemy's own commit afterwards finds psycopg's
transaction already over. Elsewhere (SQLite, a libpq without pipeline mode) the
statements run and commit when the block is entered, as a plain commit would.

An error the server reports for the pipeline is raised as SQLAlchemy raises a driver's
(:meth:`sqlalchemy.exc.DBAPIError.instance`: ``IntegrityError``, ``OperationalError``...),
and a connection psycopg found broken is invalidated; SQLAlchemy's ``handle_error``
events do not see it.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from typing import Any

from sqlalchemy import Connection
from sqlalchemy.exc import DBAPIError


class Committed:
    """The outcome of :func:`committing`'s commit, waited for once by calling it."""

    __slots__ = ("_conn", "_pipeline", "_statements", "_then_commit")

    def __init__(
        self,
        conn: Connection,
        pipeline: ExitStack | None,
        statements: Any,
        *,
        then_commit: bool = True,
    ) -> None:
        self._conn, self._pipeline, self._statements = conn, pipeline, statements
        self._then_commit = then_commit

    @property
    def unread(self) -> bool:
        """Sent, and its answer not read yet."""
        return self._pipeline is not None

    def __call__(self) -> None:
        """Wait for the statements and the ``COMMIT``; raise a failure as SQLAlchemy's
        exception (the transaction is then left failed for the caller to roll back)."""
        pipeline, self._pipeline = self._pipeline, None
        if pipeline is None:
            return
        try:
            pipeline.close()
        except Exception as exc:
            wrapped = self.wrapped(exc)
            if wrapped is exc:
                raise
            raise wrapped from exc
        if self._then_commit:
            self._conn.commit()  # SQLAlchemy's side: psycopg's transaction is already over

    def abandon(self) -> None:
        """Give up on the caller's side after an error in its block: the pipeline is
        still read to its end (so the connection can be rolled back and reused), and a
        failure there is left to the caller's rollback."""
        pipeline, self._pipeline = self._pipeline, None
        if pipeline is None:
            return
        try:
            pipeline.close()
        except Exception:  # noqa: BLE001 - the caller's own error is the one raised
            self._invalidate_if_broken()

    def wrapped(self, exc: Exception) -> Exception:
        """``exc`` as SQLAlchemy raises a driver's error (``conn`` invalidated when
        psycopg found the connection broken)."""
        import psycopg

        broken = self._invalidate_if_broken()
        if not isinstance(exc, psycopg.Error):
            return exc
        dialect = self._conn.dialect
        sent = [str(statement.compile(dialect=dialect)) for statement, _ in self._statements]
        return DBAPIError.instance(
            ";\n".join([*sent, "COMMIT"]), None, exc, psycopg.Error, connection_invalidated=broken
        )

    def _invalidate_if_broken(self) -> bool:
        if self._conn.invalidated:
            return True
        driver: Any = self._conn.connection.driver_connection
        if driver.broken or driver.closed:
            self._conn.invalidate()
            return True
        return False


def pipelines(conn: Connection) -> bool:
    """Whether :func:`committing` overlaps its commit on ``conn`` (psycopg, and a libpq
    with pipeline mode)."""
    if conn.dialect.driver != "psycopg":
        return False
    import psycopg

    return bool(psycopg.Pipeline.is_supported())


@contextmanager
def committing(
    conn: Connection, statements: Sequence[tuple[Any, Mapping[str, Any]]]
) -> Iterator[Committed]:
    """Run ``statements`` and COMMIT ``conn``'s transaction, overlapping the block.

    The :class:`Committed` yielded, called, waits for the ``COMMIT`` and must be called
    before anything that must follow the commit; nobody else may use ``conn`` until
    then. The block's end calls it if the block did not; a block left by an error reads
    the pipeline to its end and re-raises that error. Where :func:`pipelines` is false,
    the statements run and commit when the block is entered.
    """
    if not pipelines(conn):
        for statement, params in statements:
            conn.execute(statement, params)
        conn.commit()
        yield Committed(conn, None, statements)
        return
    committed = _send(conn, statements, then_commit=True)
    try:
        yield committed
    except BaseException:
        committed.abandon()
        raise
    committed()


def commit_with(conn: Connection, statements: Sequence[tuple[Any, Mapping[str, Any]]]) -> None:
    """Run ``statements`` and COMMIT ``conn``'s transaction in one round trip, and wait.

    For a caller inside SQLAlchemy's own commit of ``conn`` (its ``commit`` event, which
    comes right before it): that commit then finds psycopg's transaction over and sends
    nothing. A failure is raised as SQLAlchemy's exception, and the transaction is
    rolled back here: SQLAlchemy does not roll back a connection whose commit failed (a
    failed ``COMMIT`` ends the transaction), but here the ``COMMIT`` was skipped. Only
    where :func:`pipelines` is true.
    """
    try:
        _send(conn, statements, then_commit=False)()
    except BaseException:
        roll_back_refused_commit(conn)
        raise


def roll_back_refused_commit(conn: Connection) -> None:
    """Roll back the driver's transaction of ``conn``, whose commit was refused before
    its ``COMMIT`` reached the server (from SQLAlchemy's ``commit`` event): SQLAlchemy
    does not roll back a connection whose commit failed, and the pool would take it back
    with the transaction open. A connection that cannot roll back is invalidated."""
    if conn.invalidated:
        return
    driver: Any = conn.connection.driver_connection
    try:
        driver.rollback()
    except Exception:  # noqa: BLE001 - the commit's own error is the one raised
        conn.invalidate()


def _send(
    conn: Connection, statements: Sequence[tuple[Any, Mapping[str, Any]]], *, then_commit: bool
) -> Committed:
    """Queue ``statements`` and a ``COMMIT`` on psycopg's pipeline, unread."""
    driver: Any = conn.connection.driver_connection
    pipeline = ExitStack()
    pipeline.enter_context(driver.pipeline())
    committed = Committed(conn, pipeline, statements, then_commit=then_commit)
    try:
        for statement, params in statements:
            conn.execute(statement, params)
        with driver.cursor() as cursor:
            cursor.execute("COMMIT")  # queued: the server commits after the statements
    except Exception as exc:
        # A statement's error may come back while the pipeline is still being sent.
        committed.abandon()
        wrapped = committed.wrapped(exc)
        if wrapped is exc:
            raise
        raise wrapped from exc
    except BaseException:
        committed.abandon()
        raise
    return committed
