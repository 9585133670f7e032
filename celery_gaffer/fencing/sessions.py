"""The hooks that seal every commit a run makes (the fenced write path).

Sessions from :func:`fenced_sessions` carry the run's :class:`~.context.RunContext` in
``session.info``. Their ``before_commit`` hook flushes the session and plans the seal
(see :mod:`.seal`) of its connection's transaction with :func:`seal_at_commit`; the
engine's ``commit`` event, which SQLAlchemy fires right before it sends the ``COMMIT``,
carries the seal out in the same transaction as the writes, after every flush (on
PostgreSQL in the same round trip as the ``COMMIT``). A refusal raises there, and the
transaction is rolled back. A savepoint's release (``begin_nested()``), for which
SQLAlchemy runs the same session hooks, is not sealed: it commits nothing, and the
transaction's ``COMMIT`` covers its writes.

The ``commit`` listener acts only on a connection whose seal was planned, and forgets
the plan with the connection; every other commit on the engine is left as it was.
"""

from __future__ import annotations

from typing import Any
from weakref import WeakKeyDictionary

from sqlalchemy import Connection, Engine, event
from sqlalchemy.orm import Session, sessionmaker

from ..exceptions import GafferError
from ..runtime import runtime
from ..store.models import Models
from ..store.pipelined import roll_back_refused_commit
from .context import RunContext
from .seal import SealPlan

RUN_INFO = "gaffer_run"
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
            listen_for_seals(engine)
            event.listen(factory, "before_commit", _before_commit)
            event.listen(factory, "after_commit", _after_commit)
            factories[id(engine)] = factory
        return factory


def _before_commit(session: Session) -> None:
    run: RunContext | None = session.info.get(RUN_INFO)
    if run is None or session.in_nested_transaction():
        # A savepoint's release is not a commit: the transaction's own COMMIT seals
        # everything in it, the savepoint's writes included.
        return
    session.flush()
    claim = session.info.get(CLAIM_INFO, "complete")
    # Read by after_commit, which follows only a commit whose seal held: set on every
    # commit, so that a refused one leaves nothing for the next.
    claims = seal_at_commit(session.connection(), run, claim)
    session.info["gaffer_claimed"] = claim if claims else None


def _after_commit(session: Session) -> None:
    if session.in_nested_transaction():
        return  # a savepoint released: nothing is durable, nothing was claimed
    run: RunContext | None = session.info.get(RUN_INFO)
    claimed = session.info.pop("gaffer_claimed", None)
    if run is not None:
        run.sealed(claimed)


def run_info(run: RunContext, claim: str | None = "complete") -> dict[str, Any]:
    return {RUN_INFO: run, CLAIM_INFO: claim}


class PendingSeals(WeakKeyDictionary[Connection, tuple[SealPlan, Models] | None]):
    """Seals planned for the next commit of a connection (forgotten with it); None: the
    connection may not commit before one is planned."""


def listen_for_seals(engine: Engine) -> None:
    """Have ``engine``'s commits carry out the seals :func:`seal_at_commit` plans."""
    with runtime().lock:
        if not event.contains(engine, "commit", _seal_pending):
            event.listen(engine, "commit", _seal_pending)


def seal_at_commit(conn: Connection, run: RunContext, claim: str | None) -> bool:
    """Seal ``conn``'s transaction for ``run`` when it commits (``claim``: "complete",
    "claim" or None; see :meth:`RunContext.plan_seal`); the commit then raises FenceLost
    or AlreadyProcessed instead. ``conn``'s engine must be listened to
    (:func:`listen_for_seals`). True when the commit claims or completes the key."""
    plan = run.plan_seal(claim)
    runtime().part("pending_seals", PendingSeals)[conn] = (plan, run.database.models)
    return plan.claims


def forbid_unsealed_commits(conn: Connection) -> None:
    """Refuse a commit of ``conn`` (with GafferError) until a seal is planned for it:
    ``conn``'s engine must be listened to (:func:`listen_for_seals`)."""
    runtime().part("pending_seals", PendingSeals)[conn] = None


def _seal_pending(conn: Connection) -> None:
    pending = runtime().part("pending_seals", PendingSeals)
    if conn not in pending:
        return
    planned = pending.pop(conn)
    try:
        if planned is None:
            pending[conn] = None  # still refused until the block's own commit
            raise GafferError(
                "self.connection(): commit inside the block is refused (it could not be "
                "sealed); the block commits, sealed, when it ends"
            )
        plan, models = planned
        plan.execute(conn, models, commit=True)
    except BaseException:
        roll_back_refused_commit(conn)
        raise
