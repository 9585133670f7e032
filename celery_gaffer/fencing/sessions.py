"""The session hooks that seal every commit a run makes (the fenced write path).

Sessions from :func:`fenced_sessions` carry the run's :class:`~.context.RunContext` in
``session.info``. Their ``before_commit`` hook flushes and seals the commit (see
:mod:`.seal`): in the same transaction as the writes, on SQLite, other drivers and a
savepoint's commit; on PostgreSQL with psycopg the seal is left on the connection and
the engine's ``commit`` event sends it with the COMMIT, after every flush of the commit,
in one round trip.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, Engine, event
from sqlalchemy.orm import Session, sessionmaker

from ..runtime import runtime
from ..store import fastpath
from .context import RunContext

RUN_INFO = "gaffer_run"
# Connection.info key: (run, claim, session) of the commit the engine's commit event seals.
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
            if not event.contains(engine, "commit", _commit_sealed):
                event.listen(engine, "commit", _commit_sealed)
                event.listen(engine, "rollback", _forget_seal)
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
        conn.info[SEAL] = (run, claim, session)
        return
    if run.seal(conn, claim):
        session.info["gaffer_claimed"] = claim


def _commit_sealed(conn: Connection) -> None:
    """The engine's ``commit`` event: seal the commit _before_commit left, with its COMMIT."""
    if conn.invalidated or conn.closed:
        return  # no connection to commit on (SQLAlchemy raises); its info is gone with it
    pending = conn.info.pop(SEAL, None)
    if pending is None:
        return
    run, claim, session = pending
    try:
        claimed = run.commit_sealed(conn, claim)
    except BaseException:
        # SQLAlchemy now sees the transaction as ended: roll it back at the driver, or a
        # plain close would hand the refused writes to the connection's next user.
        fastpath.abandon(conn)
        raise
    if claimed:
        session.info["gaffer_claimed"] = claim


def _forget_seal(conn: Connection) -> None:
    """The engine's ``rollback`` event: a commit left to seal will not happen."""
    # Not on a lost connection: reading its info would reconnect (invalidation cleared it).
    if not (conn.invalidated or conn.closed):
        conn.info.pop(SEAL, None)


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
