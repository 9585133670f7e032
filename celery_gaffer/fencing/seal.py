"""What sealing one commit checks and claims, in the commit's own transaction.

Every commit a run makes through its fenced sessions is *sealed* in its own transaction,
after its writes and before its ``COMMIT``: each lease the run holds is fence-checked
with a row lock (:func:`~celery_gaffer.store.leases.check_fence`: a stale fence, and the
commit is rolled back with :class:`~celery_gaffer.FenceLost`), then the run's key is
claimed or completed (:func:`~celery_gaffer.store.keys.claim_key`: a key another run
completed, and it is rolled back with :class:`~celery_gaffer.AlreadyProcessed`). Each is
one conditional statement whose returned row is checked; there is no other form.

The statements are looked up on their modules at call time (``lease_rows.check_fence``),
so that the chaos suite's self-test can break them in one place.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import Connection

from ..store import keys as key_rows
from ..store import leases as lease_rows
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

    def execute(self, conn: Connection, models: Models) -> None:
        """Check and claim in ``conn``'s transaction; raise FenceLost or AlreadyProcessed."""
        for lease in self.checked:
            lease_rows.check_fence(conn, models, lease.name, lease.token, lease.owner)
        if self.key is not None:
            key_rows.claim_key(
                conn, models, self.key, self.task_id, self.fence, complete=self.complete
            )
