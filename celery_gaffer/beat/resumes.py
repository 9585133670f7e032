"""Beat resumes the paused schedules whose ``paused_until`` has passed.

At most every :data:`RESUME_EVERY` seconds Beat asks the store to resume what is due
(``ScheduleStore.resume_due``: one indexed query when nothing is, and each resume as
``resume`` makes it, under the schedule's catch-up policy, with its audit entry); the
next tick fires the resumed schedules. Once :meth:`Resumes.start` ran this is done by a
thread of its own (:mod:`.side`), so the tick never waits for it; a Beat driven by an
injected clock does it from the tick, on that clock. Several Beats may do it at once:
the store resumes each schedule once.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime

from .side import SideThread

logger = logging.getLogger("celery_gaffer.beat")

#: Seconds between two looks for ended pauses, at most.
RESUME_EVERY = 5.0

#: Resumes the schedules whose pause ended by the given time; their names.
ResumeDue = Callable[[datetime], list[str]]


class Resumes:
    """Resumes the schedules whose pause ended, for one Beat (see the module)."""

    def __init__(self, resume_due: ResumeDue, clock: Callable[[], datetime]) -> None:
        self._resume_due = resume_due
        self.clock = clock
        self._looked_at: datetime | None = None
        self._thread: SideThread | None = None

    def start(self) -> None:
        """Resume from a thread of its own from now on: :meth:`on_tick` does nothing."""
        if self._thread is None:
            self._thread = SideThread(
                "gaffer-resumes", self._job, retry=RESUME_EVERY, action="pauses_not_ended"
            )
            self._thread.start()

    def stop(self) -> None:
        """Stop the thread without waiting (a resume under way commits or rolls back)."""
        if self._thread is not None:
            self._thread.stop()
            self._thread = None

    def on_tick(self, now: datetime) -> None:
        """From the tick: :meth:`resume` when :data:`RESUME_EVERY` seconds have passed
        since the last look, unless a thread of its own does."""
        looked = self._looked_at
        # A clock set back (an injected one) counts as due.
        if self._thread is None and (
            looked is None or not 0 <= (now - looked).total_seconds() < RESUME_EVERY
        ):
            self.resume(now)

    def resume(self, now: datetime) -> list[str]:
        """Resume the schedules whose pause ended by ``now``; log one line for each."""
        self._looked_at = now
        resumed = self._resume_due(now)
        for name in resumed:
            logger.info(
                "resumed schedule %s: its pause ended",
                name,
                extra={"action": "pause_ended", "schedule": name},
            )
        return resumed

    def _job(self) -> float:
        self.resume(self.clock())
        return RESUME_EVERY
