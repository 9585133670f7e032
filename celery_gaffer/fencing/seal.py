"""What sealing one commit checks and claims, run plainly or sent with the COMMIT.

Every commit a run makes through its fenced sessions is *sealed* in its own transaction:
each lease the run holds is fence-checked with a row lock (a stale fence: the commit is
rolled back with :class:`~celery_gaffer.FenceLost`), and the run's key is claimed or
completed (a key another run completed: rolled back with
:class:`~celery_gaffer.AlreadyProcessed`). A :class:`SealPlan` is what one commit does;
:meth:`SealPlan.execute` runs it as statements in the open transaction, and
:meth:`SealPlan.commit` sends it as guards together with the COMMIT in one round trip
(PostgreSQL with psycopg; guards are explained in :mod:`celery_gaffer.store.leases`).

The statements are looked up on their modules at call time (``lease_rows.check_fence``),
so that the chaos suite's self-test can break them in one place.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection
from sqlalchemy.exc import DBAPIError

from ..exceptions import AlreadyProcessed, FenceLost
from ..store import fastpath
from ..store import keys as key_rows
from ..store import leases as lease_rows
from ..store.models import Models
from .leases import Lease


@dataclass(frozen=True, slots=True)
class SealPlan:
    """What sealing one commit does."""

    #: Leases fence-checked by statements of their own.
    checked: tuple[Lease, ...]
    #: The lease checked by the key claim's own statement (PostgreSQL), if any.
    fused: Lease | None
    #: The key to claim or complete (None: the commit claims nothing).
    key: str | None
    task_id: str
    #: The fence recorded with an unfused claim (the run's newest lease's).
    fence: int | None
    #: Completes the key, rather than only claiming it (a resumable batch claims).
    complete: bool

    @property
    def claims(self) -> bool:
        return self.key is not None

    def execute(self, conn: Connection, models: Models) -> None:
        """Check and claim in ``conn``'s transaction; raise FenceLost or AlreadyProcessed."""
        for lease in self.checked:
            lease_rows.check_fence(conn, models, lease.name, lease.token, lease.owner)
        if self.key is None:
            return
        if self.fused is not None:
            held = (self.fused.name, self.fused.token, self.fused.owner)
            key_rows.fenced_claim_key(
                conn, models, held, self.key, self.task_id, complete=self.complete
            )
        else:
            key_rows.claim_key(
                conn, models, self.key, self.task_id, self.fence, complete=self.complete
            )

    def commit(self, conn: Connection, models: Models) -> None:
        """Send the checks as guards and COMMIT ``conn``'s transaction, in one round trip.

        A guard that refuses fails, and the server skips the COMMIT after it: the failure
        is raised as FenceLost or AlreadyProcessed, the transaction left to roll back.
        """
        guards = [
            lease_rows.fence_guard(models, lease.name, lease.token, lease.owner)
            for lease in self.checked
        ]
        if self.key is not None:
            if self.fused is not None:
                held = (self.fused.name, self.fused.token, self.fused.owner)
                guards.append(
                    key_rows.fenced_claim_guard(
                        models, held, self.key, self.task_id, complete=self.complete
                    )
                )
            else:
                guards.append(
                    key_rows.claim_guard(
                        models, self.key, self.task_id, self.fence, complete=self.complete
                    )
                )
        try:
            fastpath.commit(conn, guards)
        except DBAPIError as exc:
            refused = getattr(exc.orig, "sqlstate", None)
            if refused == lease_rows.FENCE_LOST_SQLSTATE:
                raise FenceLost(
                    f"lease {self._lease_names()}: the run's fence is no longer current; "
                    "write rejected"
                ) from exc
            if refused == key_rows.KEY_DONE_SQLSTATE:
                raise AlreadyProcessed(
                    f"key {self.key!r} was already completed by another run"
                ) from exc
            raise

    def _lease_names(self) -> str:
        leases: list[Any] = [*self.checked, *([self.fused] if self.fused else [])]
        return ", ".join(repr(lease.name) for lease in leases)
