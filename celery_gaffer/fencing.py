"""The run context and the session hook that fences every commit a run makes.

A :class:`RunContext` is the state of one delivery of a Gaffer task: its idempotency
key, the leases it holds and their renewer. Sessions from :func:`fenced_sessions` carry
the context in ``session.info``; their ``before_commit`` hook runs :func:`seal` in the
commit's own transaction: a row-locking fence check per held lease (zero rows: the
commit is rolled back with FenceLost) and the key claim (a completed key: rolled back
with AlreadyProcessed).
"""

from __future__ import annotations

import contextvars
import threading
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Connection, Engine, event
from sqlalchemy.orm import Session, sessionmaker

from .exceptions import FenceLost, GafferError
from .idempotency import CLAIMED, COMPLETED, claim_key, fenced_claim_key
from .leases import Lease, LeaseClient, check_fence, renewer
from .store import Database

RUN_INFO = "gaffer_run"
CLAIM_INFO = "gaffer_claim"  # "complete" (default), "claim" (a resumable batch) or None

current_run: contextvars.ContextVar[RunContext | None] = contextvars.ContextVar(
    "gaffer_run", default=None
)


@dataclass(eq=False)
class RunContext:
    """One delivery of a Gaffer task, while it runs."""

    database: Database
    task_id: str
    owner: str
    key: str | None = None
    key_state: str | None = None
    leases: list[Lease] = field(default_factory=list)
    outcome: str | None = None
    last_fence: int | None = None

    @property
    def fence(self) -> int | None:
        """The fence of the run's newest lease (recorded with its writes)."""
        return self.leases[-1].fence if self.leases else None

    def acquire(self, name: str, ttl: float, *, steal: bool = False) -> Lease:
        client = LeaseClient(self.database)
        lease = client.acquire(name, self.owner, ttl, steal=steal)
        self.leases.append(lease)
        self.last_fence = lease.fence
        renewer().add(lease)
        return lease

    def release(self, lease: Lease) -> None:
        renewer().discard(lease)
        if lease in self.leases:
            self.leases.remove(lease)
        if not lease.lost:
            LeaseClient(self.database).release(lease)

    def close(self) -> None:
        """Stop renewing and release every lease still held (best effort)."""
        for lease in list(reversed(self.leases)):
            try:
                self.release(lease)
            except Exception:  # noqa: BLE001 - an expired lease frees itself anyway
                renewer().discard(lease)
                if lease in self.leases:
                    self.leases.remove(lease)

    def seal(self, conn: Connection, claim: str | None) -> bool:
        """Fence-check every held lease and claim the key, in ``conn``'s transaction.

        Returns True when this call claimed or completed the key.
        """
        models = self.database.models
        for lease in self.leases:
            if lease.lost:
                raise FenceLost(f"lease {lease.name!r}: renewal failed; the lease was taken over")
        claiming = not (
            self.key is None
            or claim is None
            or self.key_state == COMPLETED
            or (claim == "claim" and self.key_state == CLAIMED)
        )
        complete = claim == "complete"
        if claiming and self.key is not None and conn.dialect.name == "postgresql" and self.leases:
            # The last fence check and the claim in one round trip.
            *others, last = self.leases
            for lease in others:
                check_fence(conn, models, lease.name, lease.fence)
            fenced_claim_key(
                conn,
                models,
                (last.name, last.fence),
                self.key,
                self.task_id,
                complete=complete,
            )
            return True
        for lease in self.leases:
            check_fence(conn, models, lease.name, lease.fence)
        if not claiming or self.key is None:
            return False
        claim_key(conn, models, self.key, self.task_id, self.fence, complete=complete)
        return True


_factories: dict[int, sessionmaker[Session]] = {}
_factories_lock = threading.Lock()


def fenced_sessions(engine: Engine) -> sessionmaker[Session]:
    """A session factory for ``engine`` whose commits are sealed by the run in ``info``."""
    with _factories_lock:
        factory = _factories.get(id(engine))
        if factory is None or factory.kw.get("bind") is not engine:
            factory = sessionmaker(bind=engine, expire_on_commit=False)
            event.listen(factory, "before_commit", _before_commit)
            event.listen(factory, "after_commit", _after_commit)
            _factories[id(engine)] = factory
        return factory


def _before_commit(session: Session) -> None:
    run: RunContext | None = session.info.get(RUN_INFO)
    if run is None:
        return
    session.flush()
    claim = session.info.get(CLAIM_INFO, "complete")
    if run.seal(session.connection(), claim):
        session.info["gaffer_claimed"] = claim


def _after_commit(session: Session) -> None:
    run: RunContext | None = session.info.get(RUN_INFO)
    claimed = session.info.pop("gaffer_claimed", None)
    if run is not None and claimed is not None:
        run.key_state = COMPLETED if claimed == "complete" else CLAIMED


def require_run() -> RunContext:
    run = current_run.get()
    if run is None:
        raise GafferError("no Gaffer run is active: call this from inside a GafferTask run")
    return run


def run_info(run: RunContext, claim: str | None = "complete") -> dict[str, Any]:
    return {RUN_INFO: run, CLAIM_INFO: claim}
