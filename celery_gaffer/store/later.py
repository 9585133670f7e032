"""Commits whose outcome is read later: PostgreSQL commits while the caller works on.

Beat's dispatch ends its transaction with the schedules' ``UPDATE`` and the ``COMMIT``,
statements whose only answer is "done". On libpq's protocol (:mod:`.wire`) they are
sent without waiting, and their answer read when the caller needs it (before the first
message may reach the broker), so that the server's work overlaps Beat's Python instead
of following it. Elsewhere (SQLite, a psycopg without the wire path) they run and commit
at once, as a plain commit would.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from sqlalchemy import Connection

from . import fastpath, wire


class CommitLater:
    """``statements`` and a ``COMMIT`` of ``conn``'s transaction (one is begun first if
    none is open), sent on creation where :mod:`.wire` can send them.

    Calling the object waits for their outcome, once, raising a statement's or the
    commit's error as :func:`.fastpath.commit` does (the transaction is then left failed
    for the caller to roll back). Where they cannot be sent that way they run, and
    commit, on creation (so that no lock is held longer than before), and the call does
    nothing. Until it is called nobody else may use ``conn``: a caller that cannot call
    it calls :meth:`abandon`.
    """

    __slots__ = ("_conn", "_outcome", "_planned", "_statements", "_waited")

    def __init__(self, conn: Connection, statements: Sequence[tuple[Any, Mapping[str, Any]]]):
        self._conn, self._statements, self._waited = conn, statements, False
        self._outcome: Any = None
        planned = []
        for statement, params in statements:
            plan = fastpath._plan_for(conn, statement, reading=False)
            if plan is not None and plan.wire is not None:
                planned.append((plan, plan.wire, plan.bind(params)))
        self._planned = planned
        usable = len(planned) == len(statements) and fastpath.pipelines(conn)
        if not (usable and wire.usable(conn.connection.driver_connection)):
            self._commit_now()
            return
        driver: Any = conn.connection.driver_connection
        try:
            self._outcome = wire.send_later(driver, [(w, b) for _, w, b in planned], commit=True)
        except BaseException as exc:  # noqa: BLE001 - it re-raises, as SQLAlchemy does
            conn._handle_dbapi_exception(exc, self._sql(), None, None, None)

    @property
    def unread(self) -> bool:
        """Sent, and its answers not read yet."""
        return self._outcome is not None and not self._waited

    def __call__(self) -> None:
        if self._waited:
            return
        self._waited = True
        try:
            self._outcome()
        except BaseException as exc:  # noqa: BLE001 - it re-raises, as SQLAlchemy does
            self._conn._handle_dbapi_exception(exc, self._sql(), None, None, None)

    def _commit_now(self) -> None:
        self._waited = True
        conn, statements = self._conn, self._statements
        if statements and fastpath.pipelines(conn):
            fastpath.commit(conn, statements)
            return
        for statement, params in statements:
            fastpath.execute(conn, statement, params)
        conn.commit()

    def abandon(self) -> None:
        """Give up waiting: a connection whose answers are unread is invalidated, so that
        nobody reads them (the transaction is then whatever the server made of it)."""
        if self.unread:
            self._waited = True
            self._conn.invalidate()

    def _sql(self) -> str:
        return ";\n".join([plan.sql for plan, _, _ in self._planned] + ["COMMIT"])


@contextmanager
def committing(
    conn: Connection, statements: Sequence[tuple[Any, Mapping[str, Any]]]
) -> Iterator[CommitLater]:
    """Run ``statements`` and COMMIT ``conn``'s transaction, overlapping what the caller
    does inside where :mod:`.wire` can send them: the :class:`CommitLater` yielded,
    called, waits for the COMMIT and must be called before anything that must follow
    the commit; the block's end calls it if the block did not, and a block left by an
    error abandons it. Elsewhere the commit is done when the block is entered."""
    commit = CommitLater(conn, statements)
    try:
        yield commit
    except BaseException:
        commit.abandon()
        raise
    commit()
