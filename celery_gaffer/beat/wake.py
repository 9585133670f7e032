"""When a tick next wakes, and how far ahead it decides fires: pure, no I/O.

Every input is a time the caller read (the Beat's clock and ``time.monotonic()``), so
that the planner can be tested with any clock. A run sleeps until the first of: the
database work (a schedule's next fire less the lead, a health check, a pending publish
or delivery confirmation: what :meth:`~celery_gaffer.store.schedules.Probe.earliest`
says), an alert to send, the next lost-run sweep, a third of the lease TTL, and Beat's
``max_interval``; or less, when a held send or a marking is due sooner. A run woken that
early does no database work until it is due: the planner keeps when, by the clock and by
the monotonic clock, and either passing ends the wait, so that a clock stepped back
cannot hold the database work up.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

#: Longest a Beat with a sender thread decides fires before they are due (it decides
#: twice as far ahead as its last batch took, decaying, up to this).
DECIDE_AHEAD = 0.5


@dataclass(frozen=True, slots=True)
class DatabaseDue:
    """When the database work is next due, by the clock and by the monotonic clock."""

    at: datetime
    deadline: float

    def left(self, now: datetime, monotonic: float) -> float:
        """Seconds until either time passes."""
        return min((self.at - now).total_seconds(), self.deadline - monotonic)


def until_database_work(
    *,
    now: datetime,
    monotonic: float,
    max_interval: float,
    wake_at: datetime | None,
    alerts_in: float | None,
    sweep_at: float,
    lease_ttl: float,
) -> float:
    """Seconds until the next run has work to do (never negative).

    ``wake_at``: when the database work is next due (None: nothing is); ``alerts_in``:
    seconds until alerts are to be sent from the tick (None: never); ``sweep_at``: the
    monotonic time of the next lost-run sweep; a run comes every third of ``lease_ttl``
    at least, and every ``max_interval``.
    """
    delay = float(max_interval)
    if wake_at is not None:
        delay = min(delay, (wake_at - now).total_seconds())
    if alerts_in is not None:
        delay = min(delay, alerts_in)
    return max(0.0, min(delay, sweep_at - monotonic, lease_ttl / 3))


def nap(delay: float, held_in: float | None) -> float:
    """``delay``, or ``held_in`` (a held send or a marking) when that is sooner."""
    if held_in is not None:
        delay = min(delay, held_in)
    return max(0.0, delay)


class WakePlanner:
    """The wake times of one Beat's tick, and its lead (how far ahead it decides)."""

    def __init__(self) -> None:
        #: Seconds before they are due that fires are decided (held, then sent at their
        #: time by the sender thread); 0 without one.
        self.lead = 0.0
        #: Set when the last run slept less than the database work allowed, for a held
        #: send (None: the next run does everything due).
        self.database_due: DatabaseDue | None = None

    @property
    def ahead(self) -> timedelta:
        """:attr:`lead` as a timedelta."""
        return timedelta(seconds=self.lead)

    def batch_took(self, seconds: float) -> None:
        """A dispatch took ``seconds`` from its claim until its held fires were handed
        over: decide the next twice that far ahead (decaying, at most
        :data:`DECIDE_AHEAD`), so that its fires are held before they are due."""
        self.lead = min(DECIDE_AHEAD, max(2 * seconds, 0.9 * self.lead))

    def database_wait(self, now: datetime, monotonic: float) -> float | None:
        """Seconds the database work still waits after a run that slept short for a held
        send; None: it is due (and the wait is over)."""
        due = self.database_due
        if due is None:
            return None
        left = due.left(now, monotonic)
        if left > 0:
            return left
        self.database_due = None
        return None

    def sleep(self, delay: float, held_in: float | None, now: datetime, monotonic: float) -> float:
        """The seconds to sleep when the database work is due in ``delay`` seconds and a
        held send or marking in ``held_in``; when that is sooner, the database work is
        remembered as due ``delay`` seconds after ``now`` (:meth:`database_wait`)."""
        wait = nap(delay, held_in)
        if wait < delay:
            self.database_due = DatabaseDue(now + timedelta(seconds=delay), monotonic + delay)
        return wait
