"""The run context: the state of one delivery of a Gaffer task while it runs.

A :class:`RunContext` holds the run's idempotency key and its state, the leases it holds
(renewed in the background by :mod:`.renewer`) and what its commits did. The run's
fenced sessions (:mod:`.sessions`) carry it in ``session.info``, and each commit they
make is sealed by it: :meth:`RunContext.plan_seal` decides what the commit checks and
claims (:mod:`.seal`).
"""

from __future__ import annotations

import contextvars
import os
import secrets
import socket
from dataclasses import dataclass, field

from ..exceptions import FenceLost, GafferError
from ..protocol import KeyState
from ..store import Database
from .leases import Lease, LeaseClient
from .renewer import renewer
from .seal import SealPlan

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
        """Hold a lease acquired for this run by its start record (see :mod:`.overlap`)."""
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

    def plan_seal(self, claim: str | None) -> SealPlan:
        """What sealing a commit with ``claim`` checks and claims (``claim``: "complete",
        "claim" for a resumable batch, or None). Raises FenceLost when a renewal already
        found a lease taken over."""
        self.check_renewals()
        claims = self.key is not None and not (
            claim is None
            or self.key_state == KeyState.COMPLETED
            or (claim == "claim" and self.key_state == KeyState.CLAIMED)
        )
        key = self.key if claims else None
        return SealPlan(tuple(self.leases), key, self.task_id, self.token, claim == "complete")

    def sealed(self, claim: str | None) -> None:
        """A sealed commit succeeded (``claim``: what it did to the key; see
        :func:`~.sessions.seal_at_commit`).

        The commit was durable, and so is every acquisition of the run's leases before it.
        """
        if claim is not None:
            self.key_state = KeyState.COMPLETED if claim == "complete" else KeyState.CLAIMED
        for lease in self.leases:
            lease.durable = True


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
