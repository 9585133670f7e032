"""Beat rehearsed on a virtual clock: what it would do with each fire of a time window
(``celery gaffer simulate``). Pure: no I/O.

Each schedule is taken as stored (read once by the caller). The virtual Beat is up over
the whole window but the outages given: down after an outage's start (a fire due at
that instant is still sent) and started again at its end, where its first tick catches
up. While up, it ticks at each fire's time. Every tick decides as a real Beat's does,
by the same code: the bounds and calendars through ``Bounds.window``, the catch-up
policy, ``gaffer_max_catchup`` and the starting deadline through
:func:`~celery_gaffer.beat.catchup.decide` (called again at the same instant while a
backlog is left, as Beat's next tick does), the jitter through the schedule's own
``send_at``, the runs left through ``Bounds.runs_left``; a paused schedule whose pause
ends in the window starts again from then (:func:`.watermarks.resumed`).

At the window's start each schedule stands as a Beat running until then leaves it: its
fires up to then decided (counted for ``max_runs``), so the first one reported is the
first at or after the start. A fire already in the ledger (a backfill of the same time)
is not looked for: the simulation reads no ledger.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import date, datetime, timedelta
from typing import Any, Literal

from ..protocol import Catchup, fire_key
from ..schedules import watermarks
from ..schedules.bounds import Window
from ..schedules.calendars import zone_name
from ..schedules.kinds import UTC, Schedule
from ..schedules.spec import Policy
from .catchup import decide
from .plan import missed_run, policy_with_stored_calendars

__all__ = ["FATES", "Fated", "Outage", "Subject", "Timeline", "simulate"]

FateName = Literal["on_time", "late", "skipped", "missed", "calendar_skipped", "moved"]
#: What may happen to a fire.
FATES: tuple[FateName, ...] = ("on_time", "late", "skipped", "missed", "calendar_skipped", "moved")
_ONE_MICROSECOND = timedelta(microseconds=1)


@dataclass(frozen=True, slots=True)
class Outage:
    """Beat down after ``start`` until ``end``, when it starts again."""

    start: datetime
    end: datetime


@dataclass(frozen=True, slots=True)
class Subject:
    """What the simulation reads of one stored schedule."""

    name: str
    schedule: Schedule
    policy: Policy
    watermark_at: datetime
    fired_count: int = 0
    #: When a paused schedule's pause ends (None: it stays paused).
    paused_until: datetime | None = None

    def with_stored_calendars(self, load: Callable[[], Mapping[str, frozenset[date]]]) -> Subject:
        """This schedule with the dates of the stored calendars it names, as Beat loads
        them (InvalidInput naming ``gaffer.skip_on`` for one that does not exist)."""
        policy = policy_with_stored_calendars(self.policy, load)
        return self if policy is self.policy else replace(self, policy=policy)


@dataclass(frozen=True, slots=True)
class Fated:
    """One fire and what the virtual Beat did with it."""

    schedule: str
    #: The fire's time (a moved fire's: the time it was moved to).
    nominal_at: datetime
    fate: FateName
    #: When it was sent (None: never).
    sent_at: datetime | None
    reason: str
    #: The zone its local dates are read in.
    zone: str = "UTC"

    def to_json(self) -> dict[str, Any]:
        """``{"schedule", "nominal_at", "fate", "sent_at", "reason"}``, times in UTC."""
        sent = None if self.sent_at is None else self.sent_at.astimezone(UTC).isoformat()
        return {
            "schedule": self.schedule,
            "nominal_at": self.nominal_at.astimezone(UTC).isoformat(),
            "fate": self.fate,
            "sent_at": sent,
            "reason": self.reason,
        }


class Timeline:
    """When the virtual Beat is up: always, but inside the outages (merged)."""

    def __init__(self, outages: Iterable[Outage]) -> None:
        merged: list[Outage] = []
        for outage in sorted(outages, key=lambda o: (o.start, o.end)):
            if merged and outage.start < merged[-1].end:
                last = merged[-1]
                merged[-1] = Outage(last.start, max(last.end, outage.end))
            else:
                merged.append(outage)
        self.outages = tuple(merged)

    def up_at(self, t: datetime) -> datetime:
        """The first instant at or after ``t`` that Beat is up (an outage's end)."""
        for outage in self.outages:
            if outage.start < t < outage.end:
                return outage.end
        return t


def simulate(
    subjects: Iterable[Subject],
    start: datetime,
    end: datetime,
    outages: Iterable[Outage] = (),
    *,
    max_catchup: int,
    on_time: timedelta,
) -> list[Fated]:
    """The fate of every fire ``f`` with ``start <= f <= end`` of ``subjects`` on the
    timeline the outages make (see the module docstring), by nominal time then name.
    ``max_catchup`` and ``on_time`` are Beat's (``gaffer_max_catchup``,
    :func:`.catchup.on_time_for`)."""
    timeline = Timeline(outages)
    found: list[Fated] = []
    for subject in subjects:
        found.extend(_fates(subject, start, end, timeline, max_catchup, on_time))
    found.sort(key=lambda f: (f.nominal_at, f.schedule))
    return found


def _standing(subject: Subject, start: datetime, timeline: Timeline) -> tuple[datetime, int] | None:
    """The watermark and fired count at ``start`` (just before it); None: it never fires."""
    policy, watermark, fired = subject.policy, subject.watermark_at, subject.fired_count
    begin = start - _ONE_MICROSECOND
    if not policy.enabled:
        if subject.paused_until is None:
            return None
        resumed_at = timeline.up_at(max(subject.paused_until, begin))
        standing = watermarks.Standing(subject.schedule, policy, watermark, fired)
        return watermarks.resumed(standing, resumed_at).watermark_at, fired
    if watermark < begin:
        bounds = policy.bounds
        left = bounds.runs_left(fired)
        if left:  # the fires a Beat running until ``start`` sent
            window = bounds.window(subject.schedule, fired=fired, watermark=watermark)
            fired += window.count_between(watermark, begin, left)
        watermark = begin
    return watermark, fired


def _fates(
    subject: Subject,
    start: datetime,
    end: datetime,
    timeline: Timeline,
    max_catchup: int,
    on_time: timedelta,
) -> list[Fated]:
    standing = _standing(subject, start, timeline)
    if standing is None:
        return []
    watermark, fired = standing
    policy = replace(subject.policy, enabled=True)
    bounds = policy.bounds
    zone = zone_name(subject.schedule)
    found: list[Fated] = []
    tick: datetime | None = None
    while True:
        window = bounds.window(subject.schedule, fired=fired, watermark=watermark)
        upcoming = window.next_after(watermark)
        if upcoming is None or upcoming > end:
            # The fires its calendar skips up to the end (Beat records them at its next
            # tick of the schedule, after the window).
            found.extend(_calendar_skipped(subject.name, window, watermark, end, end, zone))
            return found
        # Beat ticks at the fire's time, or when it starts again; a backlog left by
        # max_catchup is decided by the next tick, at the same instant.
        at = timeline.up_at(upcoming)
        tick = at if tick is None else max(tick, at)
        left = bounds.runs_left(fired)
        decision = decide(
            window, policy, watermark, tick, max_catchup=max_catchup, on_time=on_time,
            runs_left=left,
        )  # fmt: skip
        unbounded = decision.send
        if left is not None:
            unbounded = decide(
                window, policy, watermark, tick, max_catchup=max_catchup, on_time=on_time
            ).send
        new = _Tick(subject, window, tick, timeline, zone)
        for nominal in window.fires_between(watermark, decision.watermark):
            if nominal > end:
                break
            if nominal in decision.send:
                found.append(new.sent(nominal))
            elif nominal in decision.missed:
                found.append(new.missed(nominal))
            elif nominal in unbounded:
                reason = f"max_runs ({bounds.max_runs}) reached: the schedule is done"
                found.append(Fated(subject.name, nominal, "skipped", None, reason, zone))
            else:
                found.append(new.skipped(nominal))
        found.extend(
            _calendar_skipped(subject.name, window, watermark, decision.watermark, end, zone)
        )
        fired += len(decision.send)
        watermark = decision.watermark


def _calendar_skipped(
    name: str,
    window: Schedule | Window,
    after: datetime,
    until: datetime,
    end: datetime,
    zone: str,
) -> list[Fated]:
    """The fires in ``(after, until]`` (up to ``end``) that the calendar skips, recorded
    as Beat records them (:func:`.plan.plan_row`)."""
    if not isinstance(window, Window) or until <= after:
        return []
    return [
        Fated(name, fate.nominal, "calendar_skipped", None, fate.text, zone)
        for fate in window.fates_between(after, until)
        if fate.moved_to is None and fate.nominal <= end
    ]


@dataclass(frozen=True, slots=True)
class _Tick:
    """The fates of the fires one tick decides."""

    subject: Subject
    window: Schedule | Window
    now: datetime
    timeline: Timeline
    zone: str

    def sent(self, nominal: datetime) -> Fated:
        name = self.subject.name
        send_at = self.window.send_at(fire_key(name, nominal), nominal)
        # Due now: sent by this tick; later (jitter): at its send time, or when Beat
        # starts again if it is down then (a stopping Beat gives its held fires back).
        sent_at = self.now if send_at <= self.now else self.timeline.up_at(send_at)
        late = sent_at > send_at
        view = self.window.calendar if isinstance(self.window, Window) else None
        moved = None if view is None else view.moved_here(nominal)
        lateness = f"sent {_duration(sent_at - nominal)} late by catch-up " + (
            f"(catchup {self.subject.policy.catchup!r})"
        )
        if moved is not None:
            reason = moved.text + (f"; {lateness}" if late else "")
            return Fated(name, nominal, "moved", sent_at, reason, self.zone)
        if late:
            return Fated(name, nominal, "late", sent_at, f"Beat was down: {lateness}", self.zone)
        reason = "" if send_at == nominal else f"jitter: sent {_duration(send_at - nominal)} after"
        return Fated(name, nominal, "on_time", sent_at, reason, self.zone)

    def missed(self, nominal: datetime) -> Fated:
        policy = self.subject.policy
        run = missed_run(self.subject.name, "", nominal, self.now, policy.starting_deadline)
        return Fated(self.subject.name, nominal, "missed", None, run["error_message"], self.zone)

    def skipped(self, nominal: datetime) -> Fated:
        catchup = self.subject.policy.catchup
        if catchup == Catchup.LATEST:
            why = "only the latest fire due is sent"
        else:
            why = "a fire more than a few seconds late is not sent"
        reason = f"Beat was down: catchup {catchup!r}: {why}"
        return Fated(self.subject.name, nominal, "skipped", None, reason, self.zone)


def _duration(delta: timedelta) -> str:
    """``3h``, ``2h30m``, ``45s``, ``1.5s``."""
    seconds = delta.total_seconds()
    if seconds < 60:
        return f"{seconds:g}s"
    whole = int(seconds)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    parts = [
        f"{hours}h" if hours else "",
        f"{minutes}m" if minutes else "",
        f"{secs}s" if secs else "",
    ]
    return "".join(parts)
