"""A run's overlap lease, from the statement that records its start to its release.

A GafferTask run with an overlap policy (``forbid`` or ``replace``) holds the lease
``overlap:...`` for its whole run. One :class:`OverlapLease` per delivery, shared by the
run and its signal receivers, follows that lease through every step:

1. **Taken with the start record** (:meth:`OverlapLease.take_with_start`, at
   ``task_prerun``, PostgreSQL only): the statement that records the run's start also
   acquires the lease, on the lease engine, for an owner made for this delivery, so the
   lease costs the run no round trip of its own. A delivery whose key is already
   completed takes nothing (it ends ``duplicate``, and must not hold up, or with
   ``replace`` take over from, a run that does work). When the lease row is locked (a
   holder is committing on it right now) nothing is written: the caller records the
   start alone and the run takes the lease itself.
2. **Adopted by the run** (:meth:`OverlapLease.adopt`, first thing in the run): held
   under the same owner like any lease the run acquires: renewed in the background and
   checked by each of its fenced commits. That the start record found the lease held
   by another live run is remembered.
3. **Held for the body** (:meth:`OverlapLease.hold`): a run that does not hold the lease
   yet (SQLite, a lock timeout, no receivers installed) acquires it, waiting up to
   ``gaffer_overlap_wait`` seconds; one whose start record found it held ends at once
   unless it may wait. :class:`~celery_gaffer.exceptions.LeaseHeld` means: skip the run.
4. **Left or released when the run ends** (:meth:`OverlapLease.end_run`): left held for
   the end record when that can free it in time, else released at once with every
   other lease the run still holds. A lease found taken over (``replace``, or a stale
   fence) is no longer the run's and is never released by it.
5. **Freed by the end record** (:meth:`OverlapLease.left_for_end`, :func:`record_end`,
   at ``task_postrun``): the statement that records the run's end frees the first lease
   left held (also one a start record took for a run whose body never began: a
   ``before_start`` that raised); :func:`release_quietly` frees the others, and the
   first when its row was locked right then.

A lease nobody frees (a worker that died mid-run: Beat marks its run ``lost``) expires
with its TTL, and the next run acquires it with a higher fence.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from sqlalchemy import Connection
from sqlalchemy.exc import OperationalError

from ..exceptions import LeaseHeld, one_line
from ..protocol import Overlap
from ..store import Database
from ..store.database import is_lock_timeout
from ..store.runs import finish_statement, start_statement
from .context import RunContext, new_owner
from .leases import Lease, LeaseClient

# The run records' logger: a failed release is part of a run's end.
logger = logging.getLogger("celery_gaffer.runs")

#: Seconds between two tries of a run that waits for its overlap lease.
WAIT_STEP = 0.25


@dataclass(frozen=True, slots=True)
class Wanted:
    """The overlap lease a run must hold: its ``name`` and ``policy`` (``forbid`` or
    ``replace``; a ``replace`` run takes the lease over from a live holder)."""

    name: str
    policy: str

    @property
    def steal(self) -> bool:
        return self.policy == Overlap.REPLACE

    @classmethod
    def of(cls, lease: tuple[str, str] | None) -> Wanted | None:
        """From a task's ``gaffer_overlap_lease()`` (None: runs may overlap)."""
        return None if lease is None else cls(*lease)


def start_can_take(database: Database) -> bool:
    """Whether the statement that records a run's start can take its overlap lease (on
    PostgreSQL; elsewhere the run takes it itself)."""
    return database.dialect == "postgresql"


class Taken(NamedTuple):
    """The overlap lease a start record tried to take (``fence`` None: not taken)."""

    name: str
    fence: int | None
    owner: str
    ttl: float


@dataclass(eq=False, slots=True)
class OverlapLease:
    """One delivery's overlap lease, between its start record, its run and its end record
    (see the module for the steps)."""

    #: What the start record took, until the run adopts it (or the end record frees it).
    taken: Taken | None = None
    #: The lease the start record found held by another live run (set by :meth:`adopt`).
    refused: str | None = None
    #: Leases the run left held for its end record to free.
    at_end: list[Lease] = field(default_factory=list)

    def take_with_start(
        self,
        database: Database,
        wanted: Wanted,
        params: dict[str, Any],
        *,
        with_key_state: bool,
        counted: bool,
        hostname: str | None,
    ) -> Any:
        """Record the run's start (``params``, as for
        :func:`~celery_gaffer.store.runs.start_statement`) and take ``wanted`` in the same
        statement; the row, its fence last. None when the lease row is locked right now:
        nothing was written, the caller records the start alone."""
        owner = new_owner(hostname, params["task_id"])
        ttl = float(database.settings.lease_ttl)
        statement = start_statement(
            database.models, with_key_state=with_key_state, acquire=wanted.steal, counted=counted
        )
        try:
            with database.leases() as conn:
                taking = {**params, "name": wanted.name, "owner": owner, "ttl": ttl}
                row = conn.execute(statement, taking).one()
        except OperationalError as exc:
            if not is_lock_timeout(exc):
                raise
            return None
        fence = row[-1]
        self.taken = Taken(wanted.name, None if fence is None else int(fence), owner, ttl)
        return row

    def owner(self, hostname: str | None, task_id: str) -> str:
        """The run's lease owner: the one its start record took the lease for, if any."""
        return self.taken.owner if self.taken is not None else new_owner(hostname, task_id)

    def adopt(self, run: RunContext) -> None:
        """Hold in ``run`` (made with :meth:`owner`) the lease its start record took; from
        here on the run frees it."""
        taken, self.taken = self.taken, None
        if taken is None:
            return
        if taken.fence is None:
            self.refused = taken.name
        else:
            run.adopt(taken.name, taken.fence, taken.ttl)

    def hold(self, run: RunContext, wanted: Wanted, *, wait: float = 0.0) -> None:
        """Make sure ``run`` holds ``wanted``, trying for up to ``wait`` seconds.

        Raises :class:`LeaseHeld` when another live run holds it.
        """
        if any(lease.name == wanted.name for lease in run.leases):
            return
        if self.refused == wanted.name and wait <= 0:
            raise LeaseHeld(f"lease {wanted.name!r} is held by another live holder")
        ttl = run.database.settings.lease_ttl
        waited_until = time.monotonic() + max(0.0, float(wait))
        while True:
            try:
                run.acquire(wanted.name, ttl, steal=wanted.steal)
                return
            except LeaseHeld:
                if time.monotonic() >= waited_until:
                    raise
                time.sleep(WAIT_STEP)

    def end_run(self, run: RunContext, *, end_record_frees: bool) -> None:
        """The run's body is over: stop renewing its leases, and leave them held for the
        end record (``end_record_frees``: it is written, and nothing another worker or a
        client could see happens before it) or release them now."""
        if end_record_frees:
            self.at_end = run.close(defer=True)
        else:
            run.close()

    def left_for_end(self, database: Database) -> list[Lease]:
        """The leases the end record frees (each returned once): those the run left held,
        and a lease its start record took for a run whose body never began."""
        held, self.at_end = self.at_end, []
        taken, self.taken = self.taken, None
        if taken is not None and taken.fence is not None:
            client = LeaseClient(database)
            held.append(client.held(taken.name, taken.fence, taken.ttl, taken.owner))
        return held


def record_end(
    conn: Connection, database: Database, values: dict[str, Any], row_id: Any, held: list[Lease]
) -> list[Lease]:
    """Record the run's end (``values``), freeing ``held[0]`` in the same statement; the
    leases still to free (the others, and the first when its row was locked right then)."""
    params = {"b_" + name: value for name, value in values.items()}
    params["b_row_id"] = row_id
    if not held:
        conn.execute(finish_statement(database.models, values), params)
        return []
    lease, *others = held
    statement = finish_statement(database.models, values, release=True)
    params.update(l_name=lease.name, l_fence=lease.token, l_owner=lease.owner)
    freed = conn.execute(statement, params).scalar()
    return others if freed else held


def release_quietly(leases: list[Lease]) -> None:
    """Free ``leases`` the waiting way, logging failures (their TTL frees them anyway)."""
    for lease in leases:
        try:
            lease.client.release(lease)
        except Exception as exc:  # noqa: BLE001 - its TTL frees it anyway
            logger.warning(
                "could not release lease %s (fence %d); it expires with its TTL: %s",
                lease.name,
                lease.token,
                one_line(exc),
                extra={"action": "lease_release_failed", "lease": lease.name},
            )
