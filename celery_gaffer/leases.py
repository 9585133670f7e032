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
import os
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from sqlalchemy import Connection, Float, bindparam, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import OperationalError

from .exceptions import FenceLost, LeaseHeld
from .store import Database
from .store.dbclock import db_now
from .store.models import Models, table_of
from .store.statements import prebuilt

logger = logging.getLogger("celery_gaffer.leases")

_RELEASED = datetime(1970, 1, 1, tzinfo=timezone.utc)
# The TTL parameter of the prebuilt statements, in seconds.
_TTL = bindparam("ttl", type_=Float())


def acquire(
    conn: Connection, models: Models, name: str, owner: str, ttl: float, *, steal: bool = False
) -> int | None:
    """Take ``name`` if it is free (or expired), or always when ``steal``; return the fence.

    One statement: insert on first use, otherwise increment the fence where
    ``lease_until < now`` by the database's clock. Returns None when a live holder has it.
    """

    def build() -> Any:
        table = table_of(models.Lease)
        dialect = postgresql if conn.dialect.name == "postgresql" else sqlite
        statement = dialect.insert(table).values(
            name=bindparam("name"),
            owner=bindparam("owner"),
            fence=1,
            lease_until=db_now(_TTL),
            acquired_at=db_now(),
        )
        return statement.on_conflict_do_update(
            index_elements=[table.c.name],
            set_={
                "owner": statement.excluded.owner,
                "fence": table.c.fence + 1,
                "lease_until": statement.excluded.lease_until,
                "acquired_at": statement.excluded.acquired_at,
            },
            where=None if steal else table.c.lease_until < db_now(),
        ).returning(table.c.fence)

    upsert = prebuilt((models.prefix, "lease_acquire", conn.dialect.name, steal), build)
    fence = conn.execute(upsert, {"name": name, "owner": owner, "ttl": float(ttl)}).scalar()
    return None if fence is None else int(fence)


def renew(conn: Connection, models: Models, name: str, fence: int, ttl: float) -> bool:
    """Extend the lease if ``fence`` is still current; False means it was taken over."""

    def build() -> Any:
        table = table_of(models.Lease)
        return (
            update(table)
            .where(table.c.name == bindparam("b_name"), table.c.fence == bindparam("b_fence"))
            .values(lease_until=db_now(_TTL))
        )

    statement = prebuilt((models.prefix, "lease_renew"), build)
    result = conn.execute(statement, {"b_name": name, "b_fence": fence, "ttl": float(ttl)})
    return result.rowcount == 1


def release(
    conn: Connection, models: Models, name: str, fence: int, *, skip_locked: bool = False
) -> bool:
    """Free the lease at once, if ``fence`` is still current (the fence itself is kept).

    ``skip_locked`` (PostgreSQL): do nothing rather than wait when another transaction
    has the row locked right now. Returns whether a row was released.
    """

    def build() -> Any:
        table = table_of(models.Lease)
        where = [table.c.name == bindparam("b_name"), table.c.fence == bindparam("b_fence")]
        if skip_locked:
            free = select(table.c.name).where(*where).with_for_update(skip_locked=True)
            where.append(table.c.name.in_(free.scalar_subquery()))
        return update(table).where(*where).values(owner=None, lease_until=_RELEASED)

    statement = prebuilt((models.prefix, "lease_release", skip_locked), build)
    return conn.execute(statement, {"b_name": name, "b_fence": fence}).rowcount == 1


def check_fence(conn: Connection, models: Models, name: str, fence: int) -> None:
    """Lock the lease row if ``fence`` is current, or raise :class:`FenceLost`.

    Run it in the transaction of the writes it protects: on PostgreSQL ``FOR UPDATE``
    holds the row until commit, so no contender can take the lease between this check
    and the commit; on SQLite the transaction's ``BEGIN IMMEDIATE`` write lock does.
    """

    def build() -> Any:
        table = table_of(models.Lease)
        return (
            select(table.c.fence)
            .where(table.c.name == bindparam("name"), table.c.fence == bindparam("fence"))
            .with_for_update()
        )

    statement = prebuilt((models.prefix, "lease_check"), build)
    if conn.execute(statement, {"name": name, "fence": fence}).first() is None:
        raise FenceLost(f"lease {name!r}: fence {fence} is no longer current; write rejected")


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
            with self.database.leases() as conn:
                ok = renew(conn, self.database.models, lease.name, lease.fence, lease.ttl)
        except OperationalError as exc:
            if _is_lock_timeout(exc):
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
                if release(conn, models, lease.name, lease.fence, skip_locked=True):
                    return
        with self.database.leases() as conn:
            release(conn, models, lease.name, lease.fence)


def _is_lock_timeout(exc: OperationalError) -> bool:
    code = getattr(exc.orig, "sqlstate", None)
    return code == "55P03" or "lock timeout" in str(exc.orig).lower()


class Renewer:
    """Renews leases at a third of their TTL in one daemon thread per process.

    A lease whose renewal finds its fence stale is marked ``lost``; the run then stops
    at its next check or commit with :class:`FenceLost`. Shared by every run of the
    process (:func:`renewer`), so that a run does not start and join a thread.
    """

    def __init__(self) -> None:
        self._due: dict[Lease, float] = {}  # lease -> monotonic time of its next renewal
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._sleeping_until = 0.0  # monotonic time the thread's current wait ends

    def add(self, lease: Lease) -> None:
        with self._lock:
            due = self._due[lease] = time.monotonic() + lease.ttl / 3
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="gaffer-lease-renewer", daemon=True
                )
                self._thread.start()
            # Wake the thread only if this lease is due before its current wait ends
            # (a shorter TTL); waking it for every run would cost each run a thread
            # switch.
            early = due < self._sleeping_until
        if early:
            self._wake.set()

    def discard(self, lease: Lease) -> None:
        with self._lock:
            self._due.pop(lease, None)

    def _run(self) -> None:
        while True:
            self._wake.clear()  # before the wait is computed: a later add() wakes it
            now = time.monotonic()
            with self._lock:
                todo = [lease for lease, when in self._due.items() if when <= now]
                for lease in todo:
                    self._due[lease] = now + lease.ttl / 3
            for lease in todo:
                if lease.lost:
                    continue
                try:
                    lease.client.renew(lease)
                except Exception:  # noqa: BLE001 - a failed renewal must not kill the thread
                    _note_renewal_error(lease)
            with self._lock:
                # Leases added meanwhile are in the map: none sleeps past its renewal.
                live = [when for lease, when in self._due.items() if not lease.lost]
                self._sleeping_until = min(live, default=now + 60.0)
            self._wake.wait(max(0.0, self._sleeping_until - time.monotonic()))


_renewers: dict[int, Renewer] = {}
_renewers_lock = threading.Lock()


def renewer() -> Renewer:
    """This process's renewer (a forked child gets its own, and its own thread)."""
    pid = os.getpid()
    with _renewers_lock:
        current = _renewers.get(pid)
        if current is None:
            current = _renewers[pid] = Renewer()
        return current


def _note_renewal_error(lease: Lease) -> None:
    logger.warning(
        "could not renew lease %s (fence %d); retrying",
        lease.name,
        lease.fence,
        exc_info=True,
        extra={"action": "lease_renew_failed", "lease": lease.name},
    )
