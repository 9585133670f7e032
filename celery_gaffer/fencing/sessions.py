"""The session hooks that seal every commit a run makes (the fenced write path).

Sessions from :func:`fenced_sessions` carry the run's :class:`~.context.RunContext` in
``session.info``. Their ``before_commit`` hook flushes and seals the commit (see
:mod:`.seal`) in the same transaction as the writes, before SQLAlchemy sends the
``COMMIT``: a refusal raises there, and SQLAlchemy rolls the transaction back. A
savepoint's release (``begin_nested()``), for which SQLAlchemy runs the same hooks, is
not sealed: it commits nothing, and the transaction's ``COMMIT`` covers its writes.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Engine, event
from sqlalchemy.orm import Session, sessionmaker

from ..runtime import runtime
from .context import RunContext

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
    if run.seal(session.connection(), claim):
        session.info["gaffer_claimed"] = claim


def _after_commit(session: Session) -> None:
    if session.in_nested_transaction():
        return  # a savepoint released: nothing is durable, nothing was claimed
    run: RunContext | None = session.info.get(RUN_INFO)
    claimed = session.info.pop("gaffer_claimed", None)
    if run is not None:
        run.sealed(claimed)


def run_info(run: RunContext, claim: str | None = "complete") -> dict[str, Any]:
    return {RUN_INFO: run, CLAIM_INFO: claim}
