"""Fenced leases: acquire, renew, check and release, by the database's clock.

A lease row is ``(name, owner, fence, lease_until)``. Every acquisition increments
``fence``, so a holder whose lease was taken over carries a stale fence, and every write
it tries is rejected by :func:`check_fence` in the write's own transaction (Kleppmann's
fencing token, checked by the storage itself).

The functions here run inside a transaction the caller owns; :class:`LeaseClient` wraps
each operation in its own short transaction.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from datetime import datetime, timezone

from sqlalchemy import Connection, select, text, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import OperationalError

from .exceptions import FenceLost, LeaseHeld
from .store import Database
from .store.dbclock import db_now
from .store.models import Models, table_of

logger = logging.getLogger("celery_gaffer.leases")

# How long a lease statement waits for a row lock on PostgreSQL before giving up: a
# holder paused inside its own transaction delays a contender briefly, never for ever.
LOCK_TIMEOUT_MS = 2000
_RELEASED = datetime(1970, 1, 1, tzinfo=timezone.utc)


def acquire(
    conn: Connection, models: Models, name: str, owner: str, ttl: float, *, steal: bool = False
) -> int | None:
    """Take ``name`` if it is free (or expired), or always when ``steal``; return the fence.

    One statement: insert on first use, otherwise increment the fence where
    ``lease_until < now`` by the database's clock. Returns None when a live holder has it.
    """
    table = table_of(models.Lease)
    dialect = postgresql if conn.dialect.name == "postgresql" else sqlite
    statement = dialect.insert(table).values(
        name=name, owner=owner, fence=1, lease_until=db_now(ttl), acquired_at=db_now()
    )
    upsert = statement.on_conflict_do_update(
        index_elements=[table.c.name],
        set_={
            "owner": statement.excluded.owner,
            "fence": table.c.fence + 1,
            "lease_until": statement.excluded.lease_until,
            "acquired_at": statement.excluded.acquired_at,
        },
        where=None if steal else table.c.lease_until < db_now(),
    ).returning(table.c.fence)
    fence = conn.execute(upsert).scalar()
    return None if fence is None else int(fence)


def renew(conn: Connection, models: Models, name: str, fence: int, ttl: float) -> bool:
    """Extend the lease if ``fence`` is still current; False means it was taken over."""
    table = table_of(models.Lease)
    result = conn.execute(
        update(table)
        .where(table.c.name == name, table.c.fence == fence)
        .values(lease_until=db_now(ttl))
    )
    return result.rowcount == 1


def release(conn: Connection, models: Models, name: str, fence: int) -> None:
    """Free the lease at once, if ``fence`` is still current (the fence itself is kept)."""
    table = table_of(models.Lease)
    conn.execute(
        update(table)
        .where(table.c.name == name, table.c.fence == fence)
        .values(owner=None, lease_until=_RELEASED)
    )


def check_fence(conn: Connection, models: Models, name: str, fence: int) -> None:
    """Lock the lease row if ``fence`` is current, or raise :class:`FenceLost`.

    Run it in the transaction of the writes it protects: on PostgreSQL ``FOR UPDATE``
    holds the row until commit, so no contender can take the lease between this check
    and the commit; on SQLite the transaction's ``BEGIN IMMEDIATE`` write lock does.
    """
    table = table_of(models.Lease)
    found = conn.execute(
        select(table.c.fence).where(table.c.name == name, table.c.fence == fence).with_for_update()
    ).first()
    if found is None:
        raise FenceLost(f"lease {name!r}: fence {fence} is no longer current; write rejected")


def set_lock_timeout(conn: Connection) -> None:
    if conn.dialect.name == "postgresql":
        conn.execute(text(f"SET LOCAL lock_timeout = {LOCK_TIMEOUT_MS}"))


@dataclass(eq=False)
class Lease:
    """A lease held by this process: ``fence`` fences every write made under it."""

    name: str
    fence: int
    ttl: float
    client: LeaseClient = field(repr=False)
    lost: bool = False

    def check(self) -> None:
        """Raise :class:`FenceLost` unless the fence is still current (a locking read)."""
        if self.lost:
            raise FenceLost(f"lease {self.name!r}: renewal failed; the lease was taken over")
        with self.client.database.begin() as conn:
            check_fence(conn, self.client.database.models, self.name, self.fence)


class LeaseClient:
    """Lease operations, each in its own short transaction."""

    def __init__(self, database: Database) -> None:
        self.database = database

    def acquire(self, name: str, owner: str, ttl: float, *, steal: bool = False) -> Lease:
        """Acquire ``name`` or raise :class:`LeaseHeld`."""
        try:
            with self.database.begin() as conn:
                set_lock_timeout(conn)
                fence = acquire(conn, self.database.models, name, owner, ttl, steal=steal)
        except OperationalError as exc:
            # A lock timeout: the holder is inside a transaction on that row right now.
            if _is_lock_timeout(exc):
                raise LeaseHeld(f"lease {name!r} is busy (its row is locked)") from exc
            raise
        if fence is None:
            raise LeaseHeld(
                f"lease {name!r} is held by another live holder", owner=self.owner_of(name)
            )
        return Lease(name=name, fence=fence, ttl=ttl, client=self)

    def owner_of(self, name: str) -> str | None:
        """Who holds ``name`` now (a plain read: for messages and decisions, not fencing)."""
        table = table_of(self.database.models.Lease)
        with self.database.read() as conn:
            owner = conn.execute(select(table.c.owner).where(table.c.name == name)).scalar()
        return None if owner is None else str(owner)

    def renew(self, lease: Lease) -> bool:
        try:
            with self.database.begin() as conn:
                set_lock_timeout(conn)
                ok = renew(conn, self.database.models, lease.name, lease.fence, lease.ttl)
        except OperationalError as exc:
            if _is_lock_timeout(exc):
                return True  # someone is checking our fence right now; try again later
            raise
        if not ok:
            lease.lost = True
        return ok

    def release(self, lease: Lease) -> None:
        with self.database.begin() as conn:
            set_lock_timeout(conn)
            release(conn, self.database.models, lease.name, lease.fence)


def _is_lock_timeout(exc: OperationalError) -> bool:
    code = getattr(exc.orig, "sqlstate", None)
    return code == "55P03" or "lock timeout" in str(exc.orig).lower()


class Renewer:
    """Renews a set of leases at a third of their TTL in a daemon thread.

    A lease whose renewal finds its fence stale is marked ``lost``; the run then stops
    at its next check or commit with :class:`FenceLost`.
    """

    def __init__(self, client: LeaseClient) -> None:
        self.client = client
        self._leases: list[Lease] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def add(self, lease: Lease) -> None:
        with self._lock:
            self._leases.append(lease)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="gaffer-lease-renewer", daemon=True
                )
                self._thread.start()

    def discard(self, lease: Lease) -> None:
        with self._lock:
            if lease in self._leases:
                self._leases.remove(lease)

    def stop(self) -> None:
        self._stop.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=5)

    def _run(self) -> None:
        while True:
            with self._lock:
                leases = list(self._leases)
            interval = min((lease.ttl for lease in leases), default=1.0) / 3
            if self._stop.wait(interval):
                return
            for lease in leases:
                if lease.lost:
                    continue
                try:
                    self.client.renew(lease)
                except Exception:  # noqa: BLE001 - a failed renewal must not kill the thread
                    _note_renewal_error(lease)


def _note_renewal_error(lease: Lease) -> None:
    logger.warning(
        "could not renew lease %s (fence %d); retrying",
        lease.name,
        lease.fence,
        exc_info=True,
        extra={"action": "lease_renew_failed", "lease": lease.name},
    )
