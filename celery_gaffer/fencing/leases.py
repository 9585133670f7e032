"""Fenced leases: acquire, renew, check and release, by the database's clock.

A lease row is ``(name, owner, fence, lease_until)``. Every acquisition increments
``fence``, so a holder whose lease was taken over carries a stale fence, and every write
it tries is rejected by :func:`~celery_gaffer.store.leases.check_fence` in the write's
own transaction (Kleppmann's fencing token, checked by the storage itself).

On PostgreSQL the lease statements commit without waiting for the disk. A crash of the
server can then lose an acquisition, and the fence number it had handed out can be given
again to the next holder. That is harmless because every check also matches ``owner``
(unique to one acquisition), and because the fence reaches the outside world only once
it is durable: a fenced commit (a durable commit flushes the log up to itself, so every
earlier acquisition with it), or :meth:`Lease.fence`, which makes it durable first.

The statements are in :mod:`celery_gaffer.store.leases`; :class:`LeaseClient` runs each
in its own short transaction, and :mod:`.renewer` renews held leases in the background.
"""

from __future__ import annotations

from sqlalchemy.exc import OperationalError

from ..exceptions import FenceLost, LeaseHeld
from ..store import Database
from ..store import leases as lease_rows
from ..store.database import is_lock_timeout


class Lease:
    """A lease held by this process: its fence fences every write made under it.

    ``token`` is the fence as acquired. On PostgreSQL it may not be durable yet (a crash
    of the server can lose the acquisition); ``fence`` makes it durable before handing
    it out.
    """

    def __init__(
        self,
        name: str,
        fence: int,
        ttl: float,
        client: LeaseClient,
        *,
        owner: str = "",
        durable: bool = True,
    ) -> None:
        self.name = name
        self.token = fence
        self.ttl = ttl
        self.client = client
        self.owner = owner
        self.durable = durable
        self.lost = False

    def __repr__(self) -> str:
        return f"Lease(name={self.name!r}, fence={self.token}, ttl={self.ttl}, lost={self.lost})"

    @property
    def fence(self) -> int:
        """The fencing token, durable: no other holder can ever be given the same one.

        Read it to tag writes made outside the run's fenced sessions. On PostgreSQL the
        first read before the run's first fenced commit runs ``check`` (one round
        trip that waits for the disk), and so raises ``FenceLost`` if the lease is
        no longer this run's.
        """
        if not self.durable:
            self.check()
        return self.token

    def check(self) -> None:
        """Raise ``FenceLost`` unless the fence is still current (a locking read)."""
        if self.lost:
            raise FenceLost(f"lease {self.name!r}: renewal failed; the lease was taken over")
        with self.client.database.begin() as conn:
            lease_rows.check_fence(
                conn, self.client.database.models, self.name, self.token, self.owner
            )
        # The row lock made the commit durable, and with it the acquisition before it.
        self.durable = True


class LeaseClient:
    """Lease operations, each one statement in its own transaction (one round trip).

    Their connections come from :meth:`Database.leases`: on PostgreSQL a row-lock wait
    ends with a lock timeout (the holder is inside a transaction on the row right now).
    """

    def __init__(self, database: Database) -> None:
        self.database = database

    def acquire(self, name: str, owner: str, ttl: float, *, steal: bool = False) -> Lease:
        """Acquire ``name`` or raise :class:`LeaseHeld`."""
        try:
            with self.database.leases() as conn:
                fence = lease_rows.acquire(
                    conn, self.database.models, name, owner, ttl, steal=steal
                )
        except OperationalError as exc:
            # A lock timeout: the holder is inside a transaction on that row right now.
            if is_lock_timeout(exc):
                raise LeaseHeld(f"lease {name!r} is busy (its row is locked)") from exc
            raise
        if fence is None:
            raise LeaseHeld(
                f"lease {name!r} is held by another live holder", owner=self.owner_of(name)
            )
        return self.held(name, fence, ttl, owner)

    def held(self, name: str, fence: int, ttl: float, owner: str) -> Lease:
        """The :class:`Lease` ``owner`` acquired as ``fence`` (on PostgreSQL not durable
        yet: see the module's notes)."""
        durable = self.database.dialect != "postgresql"
        return Lease(name, fence, ttl, self, owner=owner, durable=durable)

    def vanished(self, lease: Lease) -> bool:
        """Whether ``lease``'s acquisition is gone from the row, as only a crash of the
        server can make it (fences only grow): no row, a lower fence, or the same fence
        given to another owner. A plain read, for deciding what a FenceLost means."""
        with self.database.read() as conn:
            row = lease_rows.holder(conn, self.database.models, lease.name)
        if row is None or row[1] < lease.token:
            return True
        return row[1] == lease.token and row[0] != lease.owner

    def owner_of(self, name: str) -> str | None:
        """Who holds ``name`` now (a plain read: for messages and decisions, not fencing)."""
        with self.database.read() as conn:
            row = lease_rows.holder(conn, self.database.models, name)
        return None if row is None else row[0]

    def renew(self, lease: Lease) -> bool:
        try:
            with self.database.leases() as conn:
                ok = lease_rows.renew(
                    conn, self.database.models, lease.name, lease.token, lease.owner, lease.ttl
                )
        except OperationalError as exc:
            if is_lock_timeout(exc):
                return True  # someone is checking our fence right now; try again later
            raise
        if not ok:
            lease.lost = True
        return ok

    def release(self, lease: Lease) -> None:
        models = self.database.models
        if self.database.dialect == "postgresql":
            # A release only frees the lease before its TTL does: its commit need not wait
            # for the disk (a crash can only cost the early release), and it skips a row
            # another transaction has locked, falling back to the waiting form below.
            with self.database.autocommit(relaxed=True) as conn:
                if lease_rows.release(
                    conn, models, lease.name, lease.token, lease.owner, skip_locked=True
                ):
                    return
        with self.database.leases() as conn:
            lease_rows.release(conn, models, lease.name, lease.token, lease.owner)
