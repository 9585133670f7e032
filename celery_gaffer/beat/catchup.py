"""Which fires a tick sends: the catch-up policies (docs/concepts/ledger.md), as a
pure function."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from itertools import islice

from ..protocol import Catchup
from ..schedules.bounds import Window
from ..schedules.kinds import Every, Schedule
from ..schedules.spec import Policy

_ONE_SECOND = timedelta(seconds=1)
_UNLIMITED = 2**62


@dataclass(frozen=True, slots=True)
class Decision:
    """What one tick does with one schedule.

    ``send`` and ``missed`` are nominal fire times, oldest first; ``skipped`` counts fires
    dropped by the ``latest`` / ``skip`` policies; the schedule's new ``watermark`` is the
    latest nominal time decided, and ``next_fire_at`` the first fire after it.
    """

    send: tuple[datetime, ...]
    missed: tuple[datetime, ...]
    skipped: int
    watermark: datetime
    next_fire_at: datetime | None
    #: ``skipped`` is a lower bound: there were at least that many (counting stops at
    #: :data:`SKIPPED_COUNT_LIMIT`, so that a long outage costs no more than a short one).
    skipped_at_least: bool = False


def on_time_for(max_interval: float) -> timedelta:
    """How late a fire may be and still count as on time for the ``skip`` policy, for a
    Beat whose longest sleep is ``max_interval`` seconds (a tick is never exactly
    punctual): twice that, at least 10 seconds."""
    return timedelta(seconds=max(2 * float(max_interval), 10.0))


#: Most skipped fires a tick counts one by one for a cron schedule (``every`` counts
#: exactly, by arithmetic).
SKIPPED_COUNT_LIMIT = 100


def decide(
    schedule: Schedule | Window,
    policy: Policy,
    watermark: datetime,
    now: datetime,
    *,
    max_catchup: int,
    on_time: timedelta,
    runs_left: int | None = None,
    horizon: datetime | None = None,
) -> Decision:
    """Decide the fires ``f`` with ``watermark < f <= now`` (or ``<= horizon``, when
    Beat decides ahead: how late a fire is still counts from ``now``).

    ``all`` sends every one, oldest first, at most ``max_catchup`` (the watermark then
    stops at the last one sent, so the rest are due again on the next tick); ``latest``
    sends only the most recent; ``skip`` sends only those at most ``on_time`` old (a tick
    is never exactly punctual). Any fire older than ``starting_deadline`` is recorded as
    missed instead of sent.

    The time it takes does not grow with the gap between ``watermark`` and ``now``:
    ``latest`` and ``skip`` look back from ``now`` (:meth:`last_at_or_before`), and the
    fires they drop are counted up to :data:`SKIPPED_COUNT_LIMIT`.

    A bounded schedule comes as its :class:`Window` (no fire outside its bounds), with
    ``runs_left`` (its ``max_runs`` less the fires already sent): at most that many are
    sent, the oldest first, and once none is left ``next_fire_at`` is None.
    """
    skipped = 0
    at_least = False
    until = now if horizon is None else max(now, horizon)
    if policy.catchup == Catchup.ALL:
        chosen = list(islice(schedule.fires_between(watermark, until), max_catchup + 1))
        if len(chosen) > max_catchup:
            chosen = chosen[:max_catchup]
            new_watermark = chosen[-1]
        else:
            new_watermark = max(watermark, until)
    else:
        new_watermark = max(watermark, until)
        if policy.catchup == Catchup.LATEST:
            # The latest fire due now; then, deciding ahead, the fires not due yet (a
            # fire due now is never dropped for one that is not).
            last = schedule.last_at_or_before(now) if now > watermark else None
            chosen = [last] if last is not None and last > watermark else []
            if until > now:
                chosen.extend(schedule.fires_between(max(watermark, now), until))
        else:  # skip: only the fires of the last ``on_time``, found from ``now`` back
            recent = max(watermark, now - on_time - _ONE_SECOND)
            chosen = [f for f in schedule.fires_between(recent, until) if now - f <= on_time]
        if chosen or until > watermark:
            limit = SKIPPED_COUNT_LIMIT + len(chosen)
            if isinstance(schedule, Every) or (
                isinstance(schedule, Window) and schedule.counts_exactly
            ):
                limit = _UNLIMITED  # counted by arithmetic, exactly
            counted = schedule.count_between(watermark, max(watermark, until), limit)
            skipped = max(counted - len(chosen), 0)
            at_least = counted >= limit

    if policy.starting_deadline is not None:
        deadline = timedelta(seconds=policy.starting_deadline)
        send = tuple(f for f in chosen if now - f <= deadline)
        missed = tuple(f for f in chosen if now - f > deadline)
    else:
        send, missed = tuple(chosen), ()
    next_fire_at = schedule.next_after(new_watermark)
    if runs_left is not None:
        # Missed fires were never sent: they do not count as runs.
        skipped += max(len(send) - runs_left, 0)
        send = send[:runs_left]
        if len(send) >= runs_left:
            next_fire_at = None
    return Decision(
        send=send,
        missed=missed,
        skipped=skipped,
        watermark=new_watermark,
        next_fire_at=next_fire_at,
        skipped_at_least=at_least,
    )
