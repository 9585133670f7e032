"""What a schedule will do, and why, around daylight-saving changes (``gaffer explain``).

Pure: no I/O, "now" is an argument. The fires listed are the schedule's own (the cron
engine's ``fires_between`` / ``last_at_or_before``), never recomputed here. What this
module adds is the *why*: it takes the zone's clock changes (:mod:`.clock_changes`), the
wall-clock stretch each one skips (gap) or repeats (fold), matches the expression against
that stretch with cronsim on naive wall time, and names the rule of docs/dst.md that
applies: ``gap_end``, ``first_occurrence``, ``every_instant``, ``not_affected`` or, for
``every`` schedules, ``elapsed``.
"""

from __future__ import annotations

import itertools
from dataclasses import asdict, dataclass
from datetime import date, datetime, time, timedelta, tzinfo
from typing import Any

from cronsim import CronSim

from ..exceptions import InvalidInput
from ..protocol import StrEnum
from .clock_changes import (
    ONE_SECOND,
    UTC,
    ClockChange,
    clock,
    clock_changes,
    local_clock,
    offset_text,
    parse_day,
    parse_start,
    utc_text,
)
from .cron_engine import expand_expr, for_cronsim, load_zone
from .kinds import At, Cron, Every, Schedule

__all__ = [
    "MAX_COUNT",
    "RULE_TEXT",
    "Explanation",
    "Fire",
    "Rule",
    "Transition",
    "explain",
    "explain_around",
    "offset_text",
    "parse_day",
    "parse_start",
]

#: Most fires one explanation lists (a year of a five-minute schedule is 105,120).
MAX_COUNT = 1_000_000
# Matching wall times examined in one skipped or repeated stretch (Pacific/Apia skipped
# a whole day: 1,440 minutes).
_MAX_MATCHES = 5000
_END_OF_TIME = datetime(9999, 12, 30, tzinfo=UTC)


class Rule(StrEnum):
    """Which rule of docs/dst.md decided the fires around one clock change."""

    GAP_END = "gap_end"
    FIRST_OCCURRENCE = "first_occurrence"
    EVERY_INSTANT = "every_instant"
    NOT_AFFECTED = "not_affected"
    ELAPSED = "elapsed"


#: One sentence per rule, as the CLI prints it and docs/how-to/explain.md lists it.
RULE_TEXT: dict[Rule, str] = {
    Rule.GAP_END: "a fixed time in a gap fires once, at the gap's end",
    Rule.FIRST_OCCURRENCE: "a fixed time in a fold fires once, at the first occurrence",
    Rule.EVERY_INSTANT: "wildcard minutes or hours fire at every real instant",
    Rule.NOT_AFFECTED: "the change does not touch the expression's times",
    Rule.ELAPSED: "intervals are elapsed seconds: DST does not affect them",
}


@dataclass(frozen=True, slots=True)
class Fire:
    """One fire: the UTC instant and the wall clock of the zone at that instant."""

    utc: datetime
    local: datetime
    offset: timedelta
    abbreviation: str


@dataclass(frozen=True, slots=True)
class Transition(ClockChange):
    """A clock change and what it does to the schedule: ``matches`` are the expression's
    wall times (naive) in the skipped or repeated stretch, ``rule`` the rule that decided
    their fires, ``effect`` one sentence saying so."""

    matches: tuple[datetime, ...]
    rule: Rule
    effect: str

    @property
    def affected(self) -> bool:
        return self.rule not in (Rule.NOT_AFFECTED, Rule.ELAPSED)


@dataclass(frozen=True, slots=True)
class Explanation:
    """The fires of a schedule in a window and every clock change inside it."""

    schedule: Schedule
    zone: str
    fires: tuple[Fire, ...]
    transitions: tuple[Transition, ...]
    summary: str

    def to_json(self) -> dict[str, Any]:
        """A JSON-able dict: schedule, zone, summary, fires and transitions."""
        fires = [
            {
                "local": fire.local.isoformat(),
                "utc": utc_text(fire.utc),
                "offset": offset_text(fire.offset),
                "abbreviation": fire.abbreviation,
            }
            for fire in self.fires
        ]
        transitions = [
            {
                "at_utc": utc_text(shift.at),
                "before_offset": offset_text(shift.before),
                "after_offset": offset_text(shift.after),
                "before_abbreviation": shift.before_abbreviation,
                "after_abbreviation": shift.after_abbreviation,
                "kind": shift.kind,
                "rule": str(shift.rule),
                "affected": shift.affected,
                "effect": shift.effect,
            }
            for shift in self.transitions
        ]
        return {
            "schedule": self.schedule.to_dict(),
            "zone": self.zone,
            "summary": self.summary,
            "fires": fires,
            "transitions": transitions,
        }


def explain(
    schedule: Schedule, start: datetime, count: int = 10, *, zone: str | None = None
) -> Explanation:
    """The first ``count`` fires at or after ``start`` and the clock changes among them.

    ``zone`` is the zone to show an ``every`` schedule in (default UTC); a cron schedule
    is always shown in its own zone.
    """
    tz_name, tz = _zone_of(schedule, zone)
    _check_count(count)
    if start.utcoffset() is None:
        raise InvalidInput(f"from: {start!r} must be timezone-aware", field="from")
    after = start.astimezone(UTC).replace(microsecond=0) - ONE_SECOND
    fires = list(itertools.islice(schedule.fires_between(after, _END_OF_TIME), count))
    return _explanation(schedule, tz_name, tz, fires, after, fires[-1] if fires else after)


def explain_around(
    schedule: Schedule, day: date, count: int = 10, *, zone: str | None = None
) -> Explanation:
    """``count`` fires around the local date ``day``: half before its first clock change
    (or before the day's start when it has none), the rest after, extended so that every
    change on that day is inside the listing."""
    tz_name, tz = _zone_of(schedule, zone)
    _check_count(count)
    day_start = datetime.combine(day, time(), tz).astimezone(UTC)
    near = clock_changes(tz, day_start - timedelta(days=2), day_start + timedelta(days=3))
    changes = [change for change in near if change.touches(day)]
    anchor = changes[0].at if changes else day_start
    earlier: list[datetime] = []
    cursor = anchor - ONE_SECOND
    while len(earlier) < count // 2:
        previous = schedule.last_at_or_before(cursor)
        if previous is None:
            break
        earlier.append(previous)
        cursor = previous - ONE_SECOND
    fires = earlier[::-1]
    last_change = changes[-1].at if changes else anchor
    for fire in schedule.fires_between(anchor - ONE_SECOND, _END_OF_TIME):
        if len(fires) >= MAX_COUNT or (len(fires) >= count and fire > last_change):
            break
        fires.append(fire)
    start = min([anchor, *fires[:1]]) - ONE_SECOND
    return _explanation(schedule, tz_name, tz, fires, start, max([last_change, *fires[-1:]]))


# -- internals --------------------------------------------------------------------------


def _explanation(
    schedule: Schedule,
    tz_name: str,
    tz: tzinfo,
    fires: list[datetime],
    start: datetime,
    end: datetime,
) -> Explanation:
    return Explanation(
        schedule=schedule,
        zone=tz_name,
        fires=tuple(_fire(instant, tz) for instant in fires),
        transitions=tuple(_describe(schedule, change) for change in clock_changes(tz, start, end)),
        summary=_summary(schedule, tz_name),
    )


def _fire(instant: datetime, tz: tzinfo) -> Fire:
    local = instant.astimezone(tz)
    offset = local.utcoffset()
    assert offset is not None  # an aware datetime in a ZoneInfo
    return Fire(utc=instant, local=local, offset=offset, abbreviation=local.tzname() or "")


def _summary(schedule: Schedule, tz_name: str) -> str:
    if isinstance(schedule, Every):
        return f"every {schedule.interval} s: {RULE_TEXT[Rule.ELAPSED]} (shown in {tz_name})"
    if isinstance(schedule, At):
        return (
            f"at {schedule.when:%Y-%m-%dT%H:%M:%SZ}: fires once, at that instant; DST does "
            f"not move it (shown in {tz_name})"
        )
    if schedule.is_fixed_time:
        return (
            f"cron {schedule.expr!r} in {tz_name} is fixed-time (neither minute nor hour "
            "starts with *): in a gap it fires once at the gap's end, in a fold once, at "
            "the first occurrence"
        )
    return (
        f"cron {schedule.expr!r} in {tz_name} is wildcard (its minute or hour starts with *): "
        "it fires at every real instant, so skipped times never fire and repeated times "
        "fire twice"
    )


def _describe(schedule: Schedule, change: ClockChange) -> Transition:
    matches: tuple[datetime, ...] = ()
    if isinstance(schedule, (Every, At)):
        rule = Rule.ELAPSED
    else:
        matches = _matches(schedule, change.wall_from, change.wall_to)
        if not matches:
            rule = Rule.NOT_AFFECTED
        elif not schedule.is_fixed_time:
            rule = Rule.EVERY_INSTANT
        else:
            rule = Rule.GAP_END if change.kind == "gap" else Rule.FIRST_OCCURRENCE
    effect = f"{change.clocks()}; {_effect(change, matches, rule)}"
    if rule is Rule.GAP_END and _matches(schedule, change.wall_to, change.wall_to + ONE_SECOND):
        # The gap's end is one of the expression's own times: both are one fire.
        effect += f", which is also its {clock(change.wall_to)} fire: one fire for both"
    return Transition(**asdict(change), matches=matches, rule=rule, effect=effect)


def _matches(schedule: Cron, wall_from: datetime, wall_to: datetime) -> tuple[datetime, ...]:
    """The expression's wall times in ``[wall_from, wall_to)`` (naive, as cron sees them)."""
    sim = CronSim(for_cronsim(expand_expr(schedule.expr)), wall_from - ONE_SECOND)
    found: list[datetime] = []
    for match in sim:
        if match >= wall_to or len(found) >= _MAX_MATCHES:
            break
        found.append(match)
    return tuple(found)


def _effect(change: ClockChange, matches: tuple[datetime, ...], rule: Rule) -> str:
    """What the change does to this schedule, in the terms of docs/dst.md."""
    if rule is Rule.ELAPSED:
        return f"{RULE_TEXT[Rule.ELAPSED]}, only the local times shown change"
    if rule is Rule.NOT_AFFECTED:
        way = "skipped" if change.kind == "gap" else "repeated"
        return f"the expression has no time in {change.stretch()} ({way}): not affected"
    times = _times(matches)
    many = len(matches) > 1
    if change.kind == "gap":
        missing = f"{times} {'do' if many else 'does'} not exist"
        if rule is Rule.EVERY_INSTANT:
            return f"{missing}, so {'they do' if many else 'it does'} not fire"
        end = local_clock(change.at, change.after, change.after_abbreviation)
        together = "together, " if many else ""
        return f"{missing}: fires once, {together}at the gap's end, {end}"
    repeated = f"{times} {'happen' if many else 'happens'} twice"
    first = (matches[0] - change.before).replace(tzinfo=UTC)
    second = (matches[0] - change.after).replace(tzinfo=UTC)
    first_text = local_clock(first, change.before, change.before_abbreviation)
    if rule is Rule.FIRST_OCCURRENCE and many:
        zone = change.before_abbreviation or offset_text(change.before)
        return f"{repeated}: fires each once, at its first occurrence, {zone}"
    if rule is Rule.FIRST_OCCURRENCE:
        return f"{repeated}: fires once, at the first occurrence, {first_text}"
    if many:
        return f"{repeated}: each fires at both occurrences ({2 * len(matches)} fires)"
    second_text = local_clock(second, change.after, change.after_abbreviation)
    return f"{repeated}: fires at both, {first_text} and {second_text}"


def _times(matches: tuple[datetime, ...]) -> str:
    texts = [clock(match) for match in matches]
    if len(texts) == 1:
        return texts[0]
    if len(texts) <= 4:
        return f"{', '.join(texts[:-1])} and {texts[-1]}"
    return f"its {len(texts)} times from {texts[0]} to {texts[-1]}"


def _zone_of(schedule: Schedule, zone: str | None) -> tuple[str, tzinfo]:
    if isinstance(schedule, Cron):
        if zone is not None and zone != schedule.tz:
            raise InvalidInput(
                f"tz: a cron schedule is shown in its own zone ({schedule.tz}), not {zone!r}",
                field="tz",
            )
        return schedule.tz, load_zone(schedule.tz)
    name = "UTC" if zone is None else zone
    return name, load_zone(name)


def _check_count(count: int) -> None:
    if not 1 <= count <= MAX_COUNT:
        raise InvalidInput(f"count: must be between 1 and {MAX_COUNT}, got {count}", field="count")
