"""What sealing one commit checks and claims, in the commit's own transaction.

Every commit a run makes through its fenced sessions is *sealed* in its own transaction,
after its writes and right before its ``COMMIT`` (:mod:`.sessions`): each lease the run
holds is fence-checked with a row lock (a stale fence, and the commit is rolled back with
:class:`~celery_gaffer.FenceLost`), then the run's key is claimed or completed (a key
another run completed, and it is rolled back with :class:`~celery_gaffer.AlreadyProcessed`).
:func:`celery_gaffer.store.seal.seal` says how, per database; on PostgreSQL the seal and
the ``COMMIT`` go in one round trip.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import Connection

from ..store import seal as seal_rows
from ..store.models import Models
from .leases import Lease


@dataclass(frozen=True, slots=True)
class SealPlan:
    """What sealing one commit does."""

    #: Leases fence-checked, in the order the run acquired them.
    checked: tuple[Lease, ...]
    #: The key to claim or complete (None: the commit claims nothing).
    key: str | None
    task_id: str
    #: The fence recorded with the claim (the run's newest lease's).
    fence: int | None
    #: Completes the key, rather than only claiming it (a resumable batch claims).
    complete: bool

    @property
    def claims(self) -> bool:
        return self.key is not None

    def execute(self, conn: Connection, models: Models, *, commit: bool = False) -> None:
        """Check and claim in ``conn``'s transaction; raise FenceLost or AlreadyProcessed.

        ``commit``: the caller is SQLAlchemy's commit of ``conn``, which this may carry
        out in the same round trip (see :func:`celery_gaffer.store.seal.seal`).
        """
        seal_rows.seal(
            conn,
            models,
            [(lease.name, lease.token, lease.owner) for lease in self.checked],
            self.key,
            self.task_id,
            self.fence,
            complete=self.complete,
            commit=commit,
        )
