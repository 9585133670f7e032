"""Which fires a tick sends: the catch-up policies (docs/concepts/ledger.md), as a
pure function."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from itertools import islice

from ..protocol import Catchup
from ..schedules.kinds import Cron, Every
from ..schedules.spec import Policy


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


def decide(
    schedule: Cron | Every,
    policy: Policy,
    watermark: datetime,
    now: datetime,
    *,
    max_catchup: int,
    on_time: timedelta,
) -> Decision:
    """Decide the fires ``f`` with ``watermark < f <= now``.

    ``all`` sends every one, oldest first, at most ``max_catchup`` (the watermark then
    stops at the last one sent, so the rest are due again on the next tick); ``latest``
    sends only the most recent; ``skip`` sends only those at most ``on_time`` old (a tick
    is never exactly punctual). Any fire older than ``starting_deadline`` is recorded as
    missed instead of sent.
    """
    fires = schedule.fires_between(watermark, now)
    if policy.catchup == Catchup.ALL:
        chosen = list(islice(fires, max_catchup + 1))
        if len(chosen) > max_catchup:
            chosen = chosen[:max_catchup]
            new_watermark = chosen[-1]
        else:
            new_watermark = max(watermark, now)
        skipped = 0
    else:
        chosen = []
        skipped = 0
        if policy.catchup == Catchup.LATEST:
            last = None
            for last in fires:  # noqa: B007 - only the last one is wanted
                skipped += 1
            if last is not None:
                chosen = [last]
                skipped -= 1
        else:  # skip
            for fire in fires:
                if now - fire <= on_time:
                    chosen.append(fire)
                else:
                    skipped += 1
        new_watermark = max(watermark, now)

    if policy.starting_deadline is not None:
        deadline = timedelta(seconds=policy.starting_deadline)
        send = tuple(f for f in chosen if now - f <= deadline)
        missed = tuple(f for f in chosen if now - f > deadline)
    else:
        send, missed = tuple(chosen), ()
    return Decision(
        send=send,
        missed=missed,
        skipped=skipped,
        watermark=new_watermark,
        next_fire_at=schedule.next_after(new_watermark),
    )
