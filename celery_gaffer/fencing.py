"""The run context and the session hook that fences every commit a run makes.

A :class:`RunContext` is the state of one delivery of a Gaffer task: its idempotency
key, the leases it holds and their renewer. Sessions from :func:`fenced_sessions` carry
the context in ``session.info``; every commit is sealed in its own transaction: a
row-locking fence check per held lease (zero rows: the commit is rolled back with
FenceLost) and the key claim (a completed key: rolled back with AlreadyProcessed).

On PostgreSQL with psycopg the seal is sent with the COMMIT, in one round trip
(:meth:`RunContext.commit_sealed`, from the engine's ``commit`` event, so after every
flush of the commit), as guards that fail when they refuse. Elsewhere, and for a
savepoint's commit, the ``before_commit`` hook runs :meth:`RunContext.seal`.
"""

from __future__ import annotations

import contextvars
import os
import secrets
import socket
import threading
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from sqlalchemy import Connection, Engine, event
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session, sessionmaker

from .exceptions import AlreadyProcessed, FenceLost, GafferError
from .idempotency import (
    CLAIMED,
    COMPLETED,
    KEY_DONE_SQLSTATE,
    claim_guard,
    claim_key,
    fenced_claim_guard,
    fenced_claim_key,
)
from .leases import FENCE_LOST_SQLSTATE, Lease, LeaseClient, check_fence, fence_guard, renewer
from .store import Database, lean

RUN_INFO = "gaffer_run"
# Connection.info key: (run, claim, session) of the commit the engine's commit event seals.
SEAL = "gaffer_seal"
CLAIM_INFO = "gaffer_claim"  # "complete" (default), "claim" (a resumable batch) or None

current_run: contextvars.ContextVar[RunContext | None] = contextvars.ContextVar(
    "gaffer_run", default=None
)


class _Seal(NamedTuple):
    """What sealing one commit does (see :meth:`RunContext._seal_parts`)."""

    checked: list[Lease]  # leases fence-checked on their own
    fused: Lease | None  # the lease checked by the key claim's own statement
    claims: bool  # whether the commit claims (or completes) the key
    complete: bool  # completes it, rather than only claiming it


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
    #: Every lease the run acquired, released or not.
    acquired: list[Lease] = field(default_factory=list)

    @property
    def fence(self) -> int | None:
        """The fence of the run's newest lease, durable (see :attr:`Lease.fence`)."""
        return self.leases[-1].fence if self.leases else None

    @property
    def token(self) -> int | None:
        """The fence of the run's newest lease as acquired (for writes the run's own
        fenced commit makes durable)."""
        return self.leases[-1].token if self.leases else None

    def acquire(self, name: str, ttl: float, *, steal: bool = False) -> Lease:
        client = LeaseClient(self.database)
        return self._hold(client.acquire(name, self.owner, ttl, steal=steal))

    def adopt(self, name: str, fence: int, ttl: float) -> Lease:
        """Hold a lease acquired for this run by its start record (see :mod:`.run_leases`)."""
        return self._hold(LeaseClient(self.database).held(name, fence, ttl, self.owner))

    def _hold(self, lease: Lease) -> Lease:
        self.acquired.append(lease)
        self.leases.append(lease)
        self.last_fence = lease.token
        renewer().add(lease)
        return lease

    def lost_to_a_crash(self) -> bool:
        """Whether a FenceLost of this run came from a server crash that lost one of its
        acquisitions (not from another holder taking a lease over): then nobody else
        does the run's work, and the run is worth trying again."""
        unsure = [lease for lease in self.acquired if not lease.durable]
        for _ in range(2):  # a pooled connection from before the crash fails once
            try:
                return any(lease.client.vanished(lease) for lease in unsure)
            except Exception:  # noqa: BLE001 - still away: try once more
                continue
        return False

    def release(self, lease: Lease) -> None:
        renewer().discard(lease)
        if lease in self.leases:
            self.leases.remove(lease)
        if not lease.lost:
            LeaseClient(self.database).release(lease)

    def close(self, *, defer: bool = False) -> list[Lease]:
        """Stop renewing and release every lease still held (best effort).

        ``defer``: release none of them; return those the caller must release (the
        run's end record does, in its own statement).
        """
        if defer:
            held = [lease for lease in reversed(self.leases) if not lease.lost]
            for lease in self.leases:
                renewer().discard(lease)
            self.leases.clear()
            return held
        for lease in list(reversed(self.leases)):
            try:
                self.release(lease)
            except Exception:  # noqa: BLE001 - an expired lease frees itself anyway
                renewer().discard(lease)
                if lease in self.leases:
                    self.leases.remove(lease)
        return []

    def check_renewals(self) -> None:
        """Raise FenceLost when a renewal found one of the run's leases taken over."""
        for lease in self.leases:
            if lease.lost:
                raise FenceLost(f"lease {lease.name!r}: renewal failed; the lease was taken over")

    def _seal_parts(self, claim: str | None, *, fuse: bool) -> _Seal:
        """What sealing a commit with ``claim`` checks and claims (``fuse``: the last
        lease's check and the key claim in one statement, PostgreSQL)."""
        self.check_renewals()
        claims = self.key is not None and not (
            claim is None
            or self.key_state == COMPLETED
            or (claim == "claim" and self.key_state == CLAIMED)
        )
        if claims and fuse and self.leases:
            *checked, fused = self.leases
            return _Seal(checked, fused, claims, claim == "complete")
        return _Seal(list(self.leases), None, claims, claim == "complete")

    def seal(self, conn: Connection, claim: str | None) -> bool:
        """Fence-check every held lease and claim the key, in ``conn``'s transaction.

        Returns True when this call claimed or completed the key.
        """
        models = self.database.models
        parts = self._seal_parts(claim, fuse=conn.dialect.name == "postgresql")
        for lease in parts.checked:
            check_fence(conn, models, lease.name, lease.token, lease.owner)
        if parts.claims and self.key is not None:
            if parts.fused is not None:
                held = (parts.fused.name, parts.fused.token, parts.fused.owner)
                fenced_claim_key(
                    conn, models, held, self.key, self.task_id, complete=parts.complete
                )
            else:
                claim_key(conn, models, self.key, self.task_id, self.token, complete=parts.complete)
        return parts.claims

    def commit_sealed(self, conn: Connection, claim: str | None) -> bool:
        """:meth:`seal` and COMMIT ``conn``'s transaction in one round trip (PostgreSQL
        with psycopg: see :mod:`.store.lean`). Each check is a guard that fails when it
        refuses, and a failed statement makes the server skip the COMMIT after it: the
        failure is raised as FenceLost or AlreadyProcessed and the transaction is left to
        roll back. Returns True when the commit claimed or completed the key."""
        models = self.database.models
        parts = self._seal_parts(claim, fuse=True)
        guards = [
            fence_guard(models, lease.name, lease.token, lease.owner) for lease in parts.checked
        ]
        if parts.claims and self.key is not None:
            if parts.fused is not None:
                held = (parts.fused.name, parts.fused.token, parts.fused.owner)
                guards.append(
                    fenced_claim_guard(
                        models, held, self.key, self.task_id, complete=parts.complete
                    )
                )
            else:
                guards.append(
                    claim_guard(models, self.key, self.task_id, self.token, complete=parts.complete)
                )
        try:
            lean.commit(conn, guards)
        except DBAPIError as exc:
            refused = getattr(exc.orig, "sqlstate", None)
            if refused == FENCE_LOST_SQLSTATE:
                names = ", ".join(repr(lease.name) for lease in self.leases)
                raise FenceLost(
                    f"lease {names}: the run's fence is no longer current; write rejected"
                ) from exc
            if refused == KEY_DONE_SQLSTATE:
                raise AlreadyProcessed(
                    f"key {self.key!r} was already completed by another run"
                ) from exc
            raise
        return parts.claims

    def sealed(self, claim: str | None) -> None:
        """A commit sealed by :meth:`seal` succeeded (``claim``: what it did to the key).

        The commit was durable, and so is every acquisition of the run's leases before it.
        """
        if claim is not None:
            self.key_state = COMPLETED if claim == "complete" else CLAIMED
        for lease in self.leases:
            lease.durable = True


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
            if not event.contains(engine, "commit", _commit_sealed):
                event.listen(engine, "commit", _commit_sealed)
                event.listen(engine, "rollback", _forget_seal)
                event.listen(engine, "checkin", _checked_in)
            _factories[id(engine)] = factory
        return factory


def _before_commit(session: Session) -> None:
    run: RunContext | None = session.info.get(RUN_INFO)
    if run is None:
        return
    session.flush()
    claim = session.info.get(CLAIM_INFO, "complete")
    conn = session.connection()
    if not session.in_nested_transaction() and lean.pipelines(conn):
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
        lean.abandon(conn)
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


def new_owner(hostname: str | None, task_id: str) -> str:
    """The lease owner of one delivery: unique even to two deliveries of one task id at
    once in one process (every lease check matches it; see :mod:`.leases`)."""
    owner = f"{hostname or socket.gethostname()}:{os.getpid()}:{task_id}:{secrets.token_hex(4)}"
    return owner[-255:]  # the column's length; the unique part is at the end


def require_run() -> RunContext:
    run = current_run.get()
    if run is None:
        raise GafferError("no Gaffer run is active: call this from inside a GafferTask run")
    return run


def run_info(run: RunContext, claim: str | None = "complete") -> dict[str, Any]:
    return {RUN_INFO: run, CLAIM_INFO: claim}
