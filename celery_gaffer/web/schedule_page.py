"""What a schedule's page shows beyond its row: the strip of its last runs, its upcoming
fires with each one a clock change moves marked (and each one its calendar skips or
moves, with the reason), and the next clock change of its zone with what it does to the
schedule, however far away. Pure: no I/O, "now" is an argument.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from ..schedules.clock_changes import clock, clock_changes
from ..schedules.display import zone_of
from ..schedules.explain import Explanation, Rule, Transition, explain_around
from ..schedules.kinds import Cron, Schedule
from .present import duration

#: How far ahead the next clock change of a zone is looked for (a zone with daylight
#: saving changes its clocks at least once a year; one without shows none).
CHANGE_HORIZON = timedelta(days=400)


@dataclass(frozen=True, slots=True)
class RunBlock:
    """One run in the strip: its id, state and a label saying both and its duration."""

    id: int
    state: str
    label: str


@dataclass(frozen=True, slots=True)
class UpcomingFire:
    """One upcoming fire; ``moved``: how a clock change moves or repeats it, else "";
    ``reason``: why its calendar skips or moves it (as ``explain`` says), else None."""

    utc: datetime
    moved: str
    effect: str
    reason: str | None = None


def run_strip(runs: Sequence[Mapping[str, Any]]) -> list[RunBlock]:
    """The runs (given newest first) as blocks, oldest first so the newest is on the
    right."""
    blocks = []
    for run in reversed(runs):
        when = run.get("nominal_at") or run.get("started_at")
        at = "" if when is None else f" at {when:%Y-%m-%d %H:%M}Z"
        label = f"run {run['id']}{at}: {run['state']}, {duration(run.get('duration'))}"
        blocks.append(RunBlock(run["id"], str(run["state"]), label))
    return blocks


def upcoming(
    explanation: Explanation | None, reasons: Sequence[str | None] = ()
) -> list[UpcomingFire]:
    """The explanation's fires, each marked when one of its clock changes touches it:
    ``02:30 → 03:00 CEST, clock change`` for a fire a gap moves, ``02:30 AEDT, repeated
    time: fires at the first only, clock change`` for one in a fold; ``reasons``: the
    calendar reason of each fire, in order (None: none)."""
    if explanation is None:
        return []
    found = []
    for number, fire in enumerate(explanation.fires):
        moved, effect = "", ""
        for change in explanation.transitions:
            note = _mark(change, fire.utc, fire.local)
            if note:
                moved, effect = note, change.effect
                break
        reason = reasons[number] if number < len(reasons) else None
        found.append(UpcomingFire(fire.utc, moved, effect, reason))
    return found


def _mark(change: Transition, utc: datetime, local: datetime) -> str:
    if not change.affected or not change.matches:
        return ""
    shown = f"{clock(local.replace(tzinfo=None))} {local.tzname() or ''}".strip()
    if change.kind == "gap":
        if utc != change.at:
            return ""
        wanted = " and ".join(clock(match) for match in change.matches[:2])
        return f"{wanted} → {shown}, clock change"
    wall = local.replace(tzinfo=None)
    if not change.wall_from <= wall < change.wall_to:
        return ""
    if change.rule is Rule.FIRST_OCCURRENCE:
        return f"{shown}, repeated time: fires at the first only, clock change"
    return f"{shown}, repeated time: fires at both, clock change"


def next_clock_change(schedule: Schedule | None, now: datetime) -> Transition | None:
    """The first clock change of the schedule's zone after ``now`` (within
    :data:`CHANGE_HORIZON`) with what it does to the schedule; None for a zone without
    one (UTC, ``every`` schedules shown in UTC, unreadable schedules)."""
    zone = zone_of(schedule)
    if not isinstance(schedule, Cron) or zone is None:  # UTC has no clock changes
        return None
    change = next(iter(clock_changes(zone, now, now + CHANGE_HORIZON)), None)
    if change is None:
        return None
    explained = explain_around(schedule, change.wall_from.date(), 2)
    for transition in explained.transitions:
        if transition.at == change.at:
            return transition
    return None
