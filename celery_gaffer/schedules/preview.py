"""Previews: what ``resume``, ``backfill`` and ``update`` will fire, said before they run.

Pure logic, no I/O. ``ScheduleStore.preview_*`` read the schedule, make the same plan
the real operation writes (the same functions compute it) and hand it here to be told:
a :class:`Preview` with a one-line summary, the fires, and the fires not sent. The CLI's
``--dry-run`` and the web console show these, so the rules are written once.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from itertools import islice

from ..exceptions import InvalidInput
from .bounds import Window
from .display import describe, when, zone_of
from .kinds import Schedule

#: How many of the fires a backfill sends a preview lists (the first ones).
LISTED_FIRES = 20
#: How many of the next fires after a resume or an edit a preview lists.
NEXT_FIRES = 5
#: Fires counted at most (``skipped`` is then one more: the summary says "more than").
COUNT_LIMIT = 100_000


@dataclass(frozen=True, slots=True)
class Preview:
    """What an operation will do, computed by its own rules; nothing is written.

    ``summary``: one line, times in the schedule's zone and UTC. ``fires``: aware UTC,
    ascending: the first fires a backfill sends (at most 20), or the next fires after a
    resume or an edit (at most 5). ``skipped``: fires the operation does not send: on
    resume those that fell while the schedule was paused or in error (counted up to
    100,000; 100,001 means more), on backfill those already in the ledger; 0 on update.
    """

    summary: str
    fires: list[datetime]
    skipped: int


def backfill_nominals(
    schedule: Schedule | Window, start: datetime, end: datetime, now: datetime, *, limit: int
) -> list[datetime]:
    """The nominal times a backfill of ``(start, end]`` covers, checked as a backfill
    checks them: aware times, ``end`` not after ``now``, at most ``limit`` fires."""
    if start.tzinfo is None or end.tzinfo is None:
        raise InvalidInput("from/to: expected timezone-aware datetimes", field="from")
    if end > now:
        raise InvalidInput("to: a backfill covers the past only", field="to")
    nominals = []
    for nominal in schedule.fires_between(start, end):
        nominals.append(nominal)
        if len(nominals) > limit:
            raise InvalidInput(f"from/to: more than {limit} fires in that range", field="from")
    return nominals


def fires_from(schedule: Schedule | Window, first: datetime | None, count: int) -> list[datetime]:
    """``first`` and the fires after it, ``count`` in all (fewer when the schedule ends);
    ``schedule`` may be seen through its bounds and calendars (a ``Window``)."""
    return list(islice(_following(schedule, first), count))


def count_fires(schedule: Schedule, start: datetime, end: datetime) -> int:
    """How many fires ``f`` have ``start < f <= end``, counting at most ``COUNT_LIMIT + 1``
    (more than the limit)."""
    return schedule.count_between(start, end, COUNT_LIMIT + 1)


def resume_preview(
    name: str,
    schedule: Schedule | None,
    *,
    paused: bool,
    in_error: bool,
    next_fire: datetime | None,
    skipped: int,
    timing: Schedule | Window | None = None,
) -> Preview:
    """What ``resume`` does to ``name`` (``paused``, ``in_error``: its state now): it
    fires next at ``next_fire`` and does not send ``skipped`` fires. A schedule neither
    paused nor in error is left as it is. ``timing``: the schedule seen through its bounds
    and calendars, whose fires are listed (default: ``schedule``)."""
    zone = zone_of(schedule)
    following = schedule if timing is None else timing
    fires = [] if following is None else fires_from(following, next_fire, NEXT_FIRES)
    upcoming = (
        f"the next fire is {when(next_fire, zone)}" if next_fire is not None else "no fire to come"
    )
    if not paused and not in_error:
        return Preview(f"{name} is not paused: resuming changes nothing; {upcoming}", fires, 0)
    while_ = "while paused" if paused else "while in error"
    if skipped == 0:
        missed = f"no fire fell {while_}"
    elif skipped > COUNT_LIMIT:
        missed = f"more than {COUNT_LIMIT:,} fires {while_} are not sent"
    else:
        missed = f"{_fires(skipped)} {while_} {_is(skipped)} not sent"
    cleared = " clears the error and" if in_error else ""
    return Preview(f"resuming{cleared} sends nothing now: {upcoming}; {missed}", fires, skipped)


def backfill_preview(
    name: str,
    schedule: Schedule,
    start: datetime,
    end: datetime,
    sent: list[datetime],
    already: int,
) -> Preview:
    """What ``backfill`` does: ``sent`` the fires it publishes, ``already`` the fires of
    the range the ledger has (not sent again)."""
    zone = zone_of(schedule)
    if not sent:
        if already:
            why = f"the range's {_fires(already)} {_is(already)} in the ledger already"
        else:
            why = f"{name} has no fire in ({when(start, zone)}, {when(end, zone)}]"
        return Preview(f"backfill sends nothing: {why}", [], already)
    span = when(sent[0], zone)
    if len(sent) > 1:
        span += f" ... {when(sent[-1], zone)}"
    ledger = f"{already or 'none'} {_is(already)} already in the ledger"
    summary = f"backfill sends {_fires(len(sent))} ({span}); {ledger}"
    return Preview(summary, sent[:LISTED_FIRES], already)


def update_preview(
    schedule: Schedule,
    *,
    enabled: bool,
    next_fire: datetime | None,
    new_timing: bool,
    timing: Schedule | Window | None = None,
) -> Preview:
    """What the schedule is after ``update``: ``new_timing`` when it starts from now;
    ``timing``: the schedule seen through its bounds and calendars, whose fires are listed
    (default: ``schedule``)."""
    written = f"after the edit: {describe(schedule)}"
    if new_timing:
        written += " (a new timing: it starts from now)"
    if not enabled:
        return Preview(f"{written}; paused: it fires again after resume", [], 0)
    if next_fire is None:
        return Preview(f"{written}; no fire to come", [], 0)
    fires = fires_from(schedule if timing is None else timing, next_fire, NEXT_FIRES)
    return Preview(f"{written}; next fire {when(next_fire, zone_of(schedule))}", fires, 0)


def _following(schedule: Schedule | Window, first: datetime | None) -> Iterator[datetime]:
    fire = first
    while fire is not None:
        yield fire
        fire = schedule.next_after(fire)


def _fires(count: int) -> str:
    return f"{count:,} fire" + ("" if count == 1 else "s")


def _is(count: int) -> str:
    return "is" if count in (0, 1) else "are"
