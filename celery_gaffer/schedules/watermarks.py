"""Where a schedule's firing resumes from when it is added, edited, paused or resumed.

A schedule's watermark is its latest decided fire time: Beat only ever considers the
fires after it, and its catch-up policy decides about those that fell before now. Its
fired count is how many scheduled fires it has sent (what ``max_runs`` counts). Every
rule that sets them outside a tick lives here, as a function of facts (the validated
spec, what is stored, ``now``) that returns a :class:`Start`; the store writes it.
Pure: no I/O.

The rules, in short:

- **add**: from now, so the first fire is the first one after now; a one-off whose
  time has passed starts just before it, so that its catch-up policy decides. A given
  watermark (an importer's last run) is kept as is.
- **replace** (``add(replace=True)``, a changed ``beat_schedule`` entry): the backlog
  is kept, unless it is no longer the schedule's: a new one-off starts as an added one
  does; a done schedule, or a paused one the new spec enables, starts again from now.
- **edit** (``update``): the same timing keeps its backlog (as on replace); a new
  timing starts again from now (a new one-off as an added one).
- **pause**: the watermark and count stay; a paused schedule has no next fire
  (:func:`next_fire`).
- **resume**: starts again from now whatever the catch-up policy: the fires that fell
  while it was paused are never sent.

The fired count is never reset: only an add starts one at zero.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from .bounds import Bounds
from .kinds import At, Schedule
from .spec import Policy, ScheduleSpec

__all__ = [
    "Standing",
    "Start",
    "added",
    "done",
    "edited",
    "first_fire",
    "kept",
    "new_watermark",
    "next_fire",
    "resumed",
]

_ONE_SECOND = timedelta(seconds=1)


@dataclass(frozen=True, slots=True)
class Standing:
    """What the rules read of a stored schedule."""

    #: None when the stored definition cannot be read (then ``error`` says why).
    schedule: Schedule | None
    policy: Policy
    watermark_at: datetime
    fired_count: int
    error: str | None = None


@dataclass(frozen=True, slots=True)
class Start:
    """Where a schedule's firing resumes from: its watermark and the fires sent so far."""

    watermark_at: datetime
    fired_count: int = 0


def done(current: Standing) -> bool:
    """True when ``current`` is enabled, readable and without error, and its bounds (a
    one-off's single time, ``start_at``/``end_at``, ``max_runs``) leave it no fire after
    its watermark."""
    if current.error or not current.policy.enabled or current.schedule is None:
        return False
    return current.policy.bounds.finished(
        current.schedule, fired=current.fired_count, watermark=current.watermark_at
    )


def first_fire(
    schedule: Schedule, bounds: Bounds, watermark: datetime, fired: int
) -> datetime | None:
    """The first fire of ``schedule`` after ``watermark`` that ``bounds`` allow, having sent
    ``fired`` fires (None: none left). Ignores whether the schedule is paused."""
    window = bounds.window(schedule, fired=fired, watermark=watermark)
    return window.next_after(watermark)


def next_fire(spec: ScheduleSpec, start: Start) -> datetime | None:
    """The next fire stored for ``spec`` starting at ``start``: its :func:`first_fire`, or
    None while it is paused (a paused schedule has no next fire)."""
    if not spec.policy.enabled:
        return None
    return first_fire(spec.schedule, spec.policy.bounds, start.watermark_at, start.fired_count)


def new_watermark(spec: ScheduleSpec, now: datetime) -> datetime:
    """The watermark a new schedule starts from: ``now``, except that a one-off whose time
    is not after ``now`` starts one second before that time, so that its catch-up policy
    (and starting deadline) decide whether it fires at once, rather than it never
    firing."""
    schedule = spec.schedule
    if isinstance(schedule, At) and schedule.when <= now:
        return schedule.when - _ONE_SECOND
    return now


def added(spec: ScheduleSpec, now: datetime, watermark_at: datetime | None = None) -> Start:
    """A new schedule's start: :func:`new_watermark`, or ``watermark_at`` as given (the
    last run an importer read from the old scheduler: the catch-up policy decides about
    the fires since), with no fire sent."""
    watermark = new_watermark(spec, now) if watermark_at is None else watermark_at
    return Start(watermark, 0)


def kept(current: Standing, spec: ScheduleSpec, now: datetime) -> Start:
    """The start when ``spec`` replaces ``current`` (``add(replace=True)``, a changed
    ``beat_schedule`` entry, an edit that keeps the timing), keeping the backlog only
    while it is still the schedule's:

    - a one-off other than ``current``'s starts as a new schedule does
      (:func:`new_watermark`);
    - a schedule that was done, or was paused and is enabled by ``spec``, starts again
      from now (its watermark if later), as on :func:`resumed`: loosening its bounds or
      enabling it never sends the fires of the time it was done or paused;
    - otherwise its watermark is kept, and with it the fires it has not decided yet.

    The fired count is always kept.
    """
    schedule = spec.schedule
    fired = current.fired_count
    if isinstance(schedule, At) and schedule != current.schedule:
        return Start(new_watermark(spec, now), fired)
    if done(current) or (not current.policy.enabled and spec.policy.enabled):
        return Start(max(current.watermark_at, now), fired)
    return Start(current.watermark_at, fired)


def edited(current: Standing, spec: ScheduleSpec, now: datetime, *, new_timing: bool) -> Start:
    """The start when an edit (``update``) turns ``current`` into ``spec``: with the same
    timing, :func:`kept` (the backlog stays); with a new timing (``new_timing``), from
    now (its watermark if later), so no fire of the new timing before the edit is sent,
    and a new one-off as a new schedule (:func:`new_watermark`). The fired count is
    always kept."""
    if not new_timing:
        return kept(current, spec, now)
    if isinstance(spec.schedule, At):
        return Start(new_watermark(spec, now), current.fired_count)
    return Start(max(current.watermark_at, now), current.fired_count)


def resumed(current: Standing, now: datetime) -> Start:
    """The start on resume (or on resuming a schedule in error): from now, or its
    watermark if later, whatever its catch-up policy, so that the fires that fell while
    it was paused are never sent. The fired count is kept."""
    return Start(max(current.watermark_at, now), current.fired_count)


def stays_paused(current: Standing) -> bool:
    """Whether a change of ``current``'s ``beat_schedule`` entry (or the entry breaking)
    leaves it paused: a schedule paused by hand stays paused, since configuration never
    resumes a schedule (only a resume does)."""
    return not current.policy.enabled
