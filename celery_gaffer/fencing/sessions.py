"""The session hooks that seal every commit a run makes (the fenced write path).

Sessions from :func:`fenced_sessions` carry the run's :class:`~.context.RunContext` in
``session.info``. Their ``before_commit`` hook flushes and seals the commit (see
:mod:`.seal`): in the same transaction as the writes, on SQLite, other drivers and a
savepoint's commit; on PostgreSQL with psycopg the seal is left on the connection and
sent with the COMMIT, after every flush of the commit, in one round trip.

That last step is the engine's dialect's ``do_commit`` (and ``do_rollback`` forgets a seal
left), wrapped for the engines this module seals, rather than listeners for the engine's
``commit`` and ``rollback`` events: SQLAlchemy dispatches every connection event of an
engine that has a listener for one of them, on every connection, for about 150,000
instructions a transaction (a fifth of a plain one). The wrappers call the dialect's own
method after theirs; a commit already sent by the seal leaves psycopg nothing to commit.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, Engine, event
from sqlalchemy.orm import Session, sessionmaker

from ..runtime import runtime
from ..store import fastpath
from .context import RunContext

RUN_INFO = "gaffer_run"
# Connection.info key: (run, claim, session, connection) of the commit the COMMIT seals.
SEAL = "gaffer_seal"
CLAIM_INFO = "gaffer_claim"  # "complete" (default), "claim" (a resumable batch) or None


class SessionFactories(dict[int, "sessionmaker[Session]"]):
    """This process's fenced session factories, by engine (id)."""


def fenced_sessions(engine: Engine) -> sessionmaker[Session]:
    """A session factory for ``engine`` whose commits are sealed by the run in ``info``."""
    factories = runtime().part("fenced_sessions", SessionFactories)
    factory = factories.get(id(engine))
    if factory is not None and factory.kw.get("bind") is engine:
        return factory
    with runtime().lock:
        factory = factories.get(id(engine))
        if factory is None or factory.kw.get("bind") is not engine:
            factory = sessionmaker(bind=engine, expire_on_commit=False)
            event.listen(factory, "before_commit", _before_commit)
            event.listen(factory, "after_commit", _after_commit)
            if not event.contains(engine, "checkin", _checked_in):
                _seal_commits(engine.dialect)
                event.listen(engine, "checkin", _checked_in)
            factories[id(engine)] = factory
        return factory


def _before_commit(session: Session) -> None:
    run: RunContext | None = session.info.get(RUN_INFO)
    if run is None:
        return
    session.flush()
    claim = session.info.get(CLAIM_INFO, "complete")
    conn = session.connection()
    if not session.in_nested_transaction() and fastpath.pipelines(conn):
        run.check_renewals()  # a lease found taken over: refused now, rolled back as usual
        # Sealed by the COMMIT itself, after every flush of this commit (_commit_sealed).
        conn.info[SEAL] = (run, claim, session, conn)
        return
    if run.seal(conn, claim):
        session.info["gaffer_claimed"] = claim


def _seal_commits(dialect: Any) -> None:
    """Wrap ``dialect``'s (one engine's) ``do_commit`` to seal the commit
    :func:`_before_commit` left on the connection, and ``do_rollback`` to forget it."""
    commit, rollback = dialect.do_commit, dialect.do_rollback

    def do_commit(dbapi_connection: Any) -> None:
        pending = _pop_seal(dbapi_connection)
        if pending is not None:
            _commit_sealed(*pending)
        commit(dbapi_connection)

    def do_rollback(dbapi_connection: Any) -> None:
        _pop_seal(dbapi_connection)  # a commit left to seal will not happen
        rollback(dbapi_connection)

    vars(dialect).update(do_commit=do_commit, do_rollback=do_rollback)


def _pop_seal(dbapi_connection: Any) -> Any:
    """The seal left on the pool's proxy of a connection (its ``info``, the connection's
    for as long as it is checked out), taken off it."""
    try:
        info = dbapi_connection.info
    except (AttributeError, NotImplementedError):  # (the proxy of a first connect has none)
        return None
    return info.pop(SEAL, None) if isinstance(info, dict) else None


def _commit_sealed(run: RunContext, claim: str | None, session: Session, conn: Connection) -> None:
    """Seal the commit _before_commit left on ``conn``, with its COMMIT."""
    if conn.invalidated or conn.closed:
        return  # no connection to commit on (SQLAlchemy raises); its info is gone with it
    try:
        claimed = run.commit_sealed(conn, claim)
    except BaseException:
        # SQLAlchemy now sees the transaction as ended: roll it back at the driver, or a
        # plain close would hand the refused writes to the connection's next user.
        fastpath.abandon(conn)
        raise
    if claimed:
        session.info["gaffer_claimed"] = claim


def _checked_in(_dbapi_connection: Any, record: Any) -> None:
    """The pool's ``checkin`` event: nothing left to seal survives its checkout."""
    if record is not None:
        record.info.pop(SEAL, None)


def _after_commit(session: Session) -> None:
    run: RunContext | None = session.info.get(RUN_INFO)
    claimed = session.info.pop("gaffer_claimed", None)
    if run is not None:
        run.sealed(claimed)


def run_info(run: RunContext, claim: str | None = "complete") -> dict[str, Any]:
    return {RUN_INFO: run, CLAIM_INFO: claim}
