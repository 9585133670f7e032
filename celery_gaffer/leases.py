"""Fenced leases: acquire, renew, check and release, by the database's clock.

A lease row is ``(name, owner, fence, lease_until)``. Every acquisition increments
``fence``, so a holder whose lease was taken over carries a stale fence, and every write
it tries is rejected by :func:`check_fence` in the write's own transaction (Kleppmann's
fencing token, checked by the storage itself).

On PostgreSQL the lease statements commit without waiting for the disk. A crash of the
server can then lose an acquisition, and the fence number it had handed out can be given
again to the next holder. That is harmless because every check also matches ``owner``
(unique to one acquisition), and because the fence reaches the outside world only once
it is durable: a fenced commit (a durable commit flushes the log up to itself, so every
earlier acquisition with it), or :meth:`Lease.fence`, which makes it durable first.

The functions here run inside a transaction the caller owns; :class:`LeaseClient` wraps
each operation in its own short transaction.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from datetime import datetime, timezone
from typing import Any

from sqlalchemy import Connection, Float, Integer, bindparam, func, literal, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import OperationalError

from .exceptions import FenceLost, LeaseHeld
from .store import Database, lean
from .store.dbclock import db_now
from .store.models import Models, table_of
from .store.statements import prebuilt

logger = logging.getLogger("celery_gaffer.leases")

RELEASED = datetime(1970, 1, 1, tzinfo=timezone.utc)  # lease_until of a freed lease
#: The error of a guard whose fence is stale ("division by zero"; see :func:`fence_guard`).
FENCE_LOST_SQLSTATE = "22012"
# The TTL parameter of the prebuilt statements, in seconds.
_TTL = bindparam("ttl", type_=Float())


def acquire(
    conn: Connection, models: Models, name: str, owner: str, ttl: float, *, steal: bool = False
) -> int | None:
    """Take ``name`` if it is free (or expired), or always when ``steal``; return the fence.

    One statement: insert on first use, otherwise increment the fence where
    ``lease_until < now`` by the database's clock. Returns None when a live holder has it.
    """
    upsert = acquire_statement(models, conn.dialect.name, steal=steal)
    fence = lean.execute(conn, upsert, {"name": name, "owner": owner, "ttl": float(ttl)}).scalar()
    return None if fence is None else int(fence)


def acquire_statement(models: Models, dialect_name: str, *, steal: bool, unless: Any = None) -> Any:
    """The acquiring upsert (parameters ``name``, ``owner``, ``ttl``), returning the fence.

    ``unless``: a SQL condition under which nothing is acquired (no row is returned).
    """

    def build() -> Any:
        table = table_of(models.Lease)
        dialect = postgresql if dialect_name == "postgresql" else sqlite
        values = {
            "name": bindparam("name", type_=table.c.name.type),
            "owner": bindparam("owner", type_=table.c.owner.type),
            "fence": literal(1, table.c.fence.type),
            "lease_until": db_now(_TTL),
            "acquired_at": db_now(),
        }
        if unless is None:
            statement = dialect.insert(table).values(**values)
        else:
            source = select(*(value.label(name) for name, value in values.items()))
            statement = dialect.insert(table).from_select(list(values), source.where(~unless))
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

    if unless is not None:
        return build()  # the caller builds it once
    return prebuilt((models.prefix, "lease_acquire", dialect_name, steal), build)


def held_by(table: Any, prefix: str = "b_") -> list[Any]:
    """The lease row ``:b_name`` while ``:b_fence`` and ``:b_owner`` hold it (``prefix``
    names the parameters)."""
    return [
        table.c.name == bindparam(prefix + "name"),
        table.c.fence == bindparam(prefix + "fence"),
        table.c.owner == bindparam(prefix + "owner"),
    ]


def renew(conn: Connection, models: Models, name: str, fence: int, owner: str, ttl: float) -> bool:
    """Extend the lease if ``fence`` (and ``owner``) still hold it; False: it was taken over."""

    def build() -> Any:
        table = table_of(models.Lease)
        return update(table).where(*held_by(table)).values(lease_until=db_now(_TTL))

    statement = prebuilt((models.prefix, "lease_renew"), build)
    params = {"b_name": name, "b_fence": fence, "b_owner": owner, "ttl": float(ttl)}
    return lean.execute(conn, statement, params).rowcount == 1


def release(
    conn: Connection,
    models: Models,
    name: str,
    fence: int,
    owner: str,
    *,
    skip_locked: bool = False,
) -> bool:
    """Free the lease at once, if ``fence`` and ``owner`` still hold it (the fence is kept).

    ``skip_locked`` (PostgreSQL): do nothing rather than wait when another transaction
    has the row locked right now. Returns whether a row was released.
    """

    def build() -> Any:
        table = table_of(models.Lease)
        where = held_by(table)
        if skip_locked:
            free = select(table.c.name).where(*where).with_for_update(skip_locked=True)
            where.append(table.c.name.in_(free.scalar_subquery()))
        return update(table).where(*where).values(owner=None, lease_until=RELEASED)

    statement = prebuilt((models.prefix, "lease_release", skip_locked), build)
    params = {"b_name": name, "b_fence": fence, "b_owner": owner}
    return lean.execute(conn, statement, params).rowcount == 1


def check_fence(conn: Connection, models: Models, name: str, fence: int, owner: str) -> None:
    """Lock the lease row if ``fence`` (and ``owner``) hold it, or raise :class:`FenceLost`.

    Run it in the transaction of the writes it protects: on PostgreSQL ``FOR UPDATE``
    holds the row until commit, so no contender can take the lease between this check
    and the commit; on SQLite the transaction's ``BEGIN IMMEDIATE`` write lock does.
    """

    def build() -> Any:
        table = table_of(models.Lease)
        return select(table.c.fence).where(*held_by(table)).with_for_update()

    statement = prebuilt((models.prefix, "lease_check"), build)
    params = {"b_name": name, "b_fence": fence, "b_owner": owner}
    if lean.execute(conn, statement, params).first() is None:
        raise FenceLost(f"lease {name!r}: fence {fence} is no longer current; write rejected")


def fence_guard(models: Models, name: str, fence: int, owner: str) -> tuple[Any, dict[str, Any]]:
    """:func:`check_fence` as a guard (PostgreSQL): a statement and its parameters that
    lock the lease row, and fail with :data:`FENCE_LOST_SQLSTATE` (a division by zero)
    unless ``fence`` and ``owner`` hold it. A failed statement aborts its transaction, so
    a COMMIT sent right after it in the same round trip does nothing."""

    def build() -> Any:
        table = table_of(models.Lease)
        locked = select(table.c.fence).where(*held_by(table)).with_for_update().cte("gaffer_fence")
        return select(
            literal(1, Integer) / select(func.count()).select_from(locked).scalar_subquery()
        )

    statement = prebuilt((models.prefix, "lease_guard"), build)
    return statement, {"b_name": name, "b_fence": fence, "b_owner": owner}


class Lease:
    """A lease held by this process: its fence fences every write made under it.

    ``token`` is the fence as acquired. On PostgreSQL it may not be durable yet (see the
    module's notes); :attr:`fence` makes it durable before handing it out.
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
        first read before the run's first fenced commit runs :meth:`check` (one round
        trip that waits for the disk), and so raises :class:`FenceLost` if the lease is
        no longer this run's.
        """
        if not self.durable:
            self.check()
        return self.token

    def check(self) -> None:
        """Raise :class:`FenceLost` unless the fence is still current (a locking read)."""
        if self.lost:
            raise FenceLost(f"lease {self.name!r}: renewal failed; the lease was taken over")
        with self.client.database.begin() as conn:
            check_fence(conn, self.client.database.models, self.name, self.token, self.owner)
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
                fence = acquire(conn, self.database.models, name, owner, ttl, steal=steal)
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
        table = table_of(self.database.models.Lease)
        with self.database.read() as conn:
            row = conn.execute(
                select(table.c.owner, table.c.fence).where(table.c.name == lease.name)
            ).first()
        if row is None or row.fence < lease.token:
            return True
        return bool(row.fence == lease.token and row.owner != lease.owner)

    def owner_of(self, name: str) -> str | None:
        """Who holds ``name`` now (a plain read: for messages and decisions, not fencing)."""
        table = table_of(self.database.models.Lease)
        with self.database.read() as conn:
            owner = conn.execute(select(table.c.owner).where(table.c.name == name)).scalar()
        return None if owner is None else str(owner)

    def renew(self, lease: Lease) -> bool:
        try:
            with self.database.leases() as conn:
                ok = renew(
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
                if release(conn, models, lease.name, lease.token, lease.owner, skip_locked=True):
                    return
        with self.database.leases() as conn:
            release(conn, models, lease.name, lease.token, lease.owner)


def is_lock_timeout(exc: OperationalError) -> bool:
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
        lease.token,
        exc_info=True,
        extra={"action": "lease_renew_failed", "lease": lease.name},
    )
