"""What a tick writes for one due schedule, decided by :mod:`.catchup`.

:func:`usable_row` validates a stored row as ``ScheduleStore`` would, :func:`plan_row`
turns a schedule's decision into ledger rows, ``missed`` run rows and its watermark
change, :func:`recount` corrects a bounded schedule's next fire after the insert.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import date, datetime
from typing import Any

from ..exceptions import GafferError
from ..protocol import FireKind, FireState, RunState, fire_key, fire_task_id
from ..schedules.bounds import Bounds, Window
from ..schedules.calendars import CalendarView
from ..schedules.kinds import Schedule, schedule_from_dict
from ..schedules.spec import Policy, ScheduleSpec, validate_entry, validate_name
from ..store.fires import NewFire
from ..store.schedule_rows import decode_json
from ..store.schedules import DueSchedule, Payload
from .catchup import Decision

logger = logging.getLogger("celery_gaffer.scheduler")


@dataclass(frozen=True, slots=True)
class RowPlan:
    """What a tick writes for one due schedule (see :func:`plan_row`)."""

    fires: list[NewFire]
    missed_runs: list[dict[str, Any]]
    change: dict[str, Any]
    #: Jittered fires inserted claimed, to be held: key -> (send time, claimed until).
    holds: dict[str, tuple[datetime, datetime]] = field(default_factory=dict)


def plan_row(
    row: DueSchedule,
    schedule: Schedule | Window,
    decision: Decision,
    now: datetime,
    republish_at: datetime,
    hold_until: datetime | None = None,
) -> RowPlan:
    """The ledger rows, ``missed`` run rows and watermark change of one decided schedule.

    A fire due now is inserted as published once (``publish_count`` 1, to be republished
    after ``republish_at`` if its publisher dies). A jittered one sent by ``hold_until``
    is inserted claimed the same way (republished ``republish_at - now`` after its send
    time), to be held and sent by this Beat (:mod:`.held`); a later one is inserted
    unpublished, to be claimed when its ``publish_after`` comes near.
    """
    fires: list[NewFire] = []
    holds: dict[str, tuple[datetime, datetime]] = {}
    view = schedule.calendar if isinstance(schedule, Window) else None
    pending = FireState.PENDING
    for nominal in decision.send:
        key = fire_key(row.name, nominal)
        send_at = schedule.send_at(key, nominal)
        moved = None if view is None else view.moved_here(nominal)
        reason = None if moved is None else moved.text
        if send_at <= now:
            fires.append(
                NewFire(row.name, nominal, _SCHEDULED, pending, republish_at, 1, key, reason)
            )
        elif hold_until is not None and send_at <= hold_until:
            claimed_until = republish_at + (send_at - now)
            holds[key] = (send_at, claimed_until)
            fires.append(
                NewFire(row.name, nominal, _SCHEDULED, pending, claimed_until, 1, key, reason)
            )
        else:
            fires.append(NewFire(row.name, nominal, _SCHEDULED, pending, send_at, 0, key, reason))
    if isinstance(schedule, Window):
        # The fires its calendars skip, recorded as such (the moved ones are sent at the
        # time they were moved to, with the reason).
        for fate in schedule.fates_between(row.watermark_at, decision.watermark):
            if fate.moved_to is None:
                fires.append(
                    NewFire(
                        row.name,
                        fate.nominal,
                        _SCHEDULED,
                        FireState.SKIPPED,
                        now,
                        0,
                        reason=fate.text,
                    )
                )
    missed_runs = []
    for nominal in decision.missed:
        fires.append(NewFire(row.name, nominal, FireKind.SCHEDULED, FireState.MISSED, now, 0))
        missed_runs.append(missed_run(row.name, row.task, nominal, now, row.starting_deadline))
    change = {
        "id": row.id,
        "watermark_at": decision.watermark,
        "next_fire_at": decision.next_fire_at,
        "error": None,
        "sent": 0,  # the fires really added: set by the tick once they are inserted
    }
    return RowPlan(fires, missed_runs, change, holds)


def recount(row: DueSchedule, spec: ScheduleSpec, change: dict[str, Any]) -> None:
    """A schedule with ``max_runs`` whose planned sends found some fires already in the
    ledger: its next fire, by the runs really left (the plan ended it too early)."""
    if change["next_fire_at"] is not None:
        return
    watermark = change["watermark_at"]
    window = spec.policy.bounds.window(
        spec.schedule, fired=row.fired_count + change["sent"], watermark=watermark
    )
    change["next_fire_at"] = window.next_after(watermark)


def missed_run(
    schedule: str, task: str, nominal: datetime, now: datetime, deadline: float | None = None
) -> dict[str, Any]:
    """The ``gaffer_job_runs`` row of a fire recorded as missed (never sent), with why."""
    key = fire_key(schedule, nominal)
    late = (now - nominal).total_seconds()
    reason = f"never sent: Beat reached it {late:.0f}s late"
    if deadline is not None:
        reason += f", past its starting deadline of {deadline:g}s"
    return {
        "task_id": fire_task_id(key),
        "task_name": task,
        "schedule": schedule,
        "nominal_at": nominal,
        "key": key,
        "attempt": 0,
        "state": RunState.MISSED,
        "error_message": reason,
        "finished_at": now,
        "updated_at": now,
    }


_SCHEDULED = FireKind.SCHEDULED


def with_stored_calendars(
    spec: ScheduleSpec, load: Callable[[], Mapping[str, frozenset[date]]]
) -> ScheduleSpec:
    """``spec`` with the dates of the stored calendars its ``skip_on`` names (``load``
    gives every stored calendar, called only when it names one); InvalidInput naming
    ``gaffer.skip_on`` when one does not exist."""
    policy = policy_with_stored_calendars(spec.policy, load)
    return spec if policy is spec.policy else replace(spec, policy=policy)


def with_checked_calendars(
    spec: ScheduleSpec, load: Callable[[], Mapping[str, frozenset[date]]], now: datetime
) -> ScheduleSpec:
    """:func:`with_stored_calendars`, refused too (NoFireSurvives, naming
    ``gaffer.skip_on``) when no fire of the schedule after ``now`` survives its calendars:
    what the store checks before writing a schedule."""
    spec = with_stored_calendars(spec, load)
    rule = spec.policy.bounds.calendar
    if rule is not None:
        CalendarView(spec.schedule, rule).check_fires(now)
    return spec


def policy_with_stored_calendars(
    policy: Policy, load: Callable[[], Mapping[str, frozenset[date]]]
) -> Policy:
    """``policy`` with the dates of the stored calendars its ``skip_on`` names (see
    :func:`with_stored_calendars`); ``policy`` itself when it names none."""
    bounds = bounds_with_stored(policy.bounds, load)
    return policy if bounds is policy.bounds else replace(policy, bounds=bounds)


def bounds_with_stored(bounds: Bounds, load: Callable[[], Mapping[str, frozenset[date]]]) -> Bounds:
    """``bounds`` with the dates of the stored calendars its calendar names (itself when
    it names none); see :func:`with_stored_calendars`."""
    rule = bounds.calendar
    if rule is None or not rule.stored_names:
        return bounds
    return replace(bounds, calendar=rule.with_stored(load()))


#: Parsed schedules and validated payloads kept by :func:`usable_row`, by stored text.
PART_CACHE = 4_096


def usable_row(
    row: DueSchedule, parts: dict[tuple[Any, ...], Any] | None = None
) -> tuple[ScheduleSpec, Payload]:
    """A due row checked with the rules every entry passes before it is written
    (GafferError, or InvalidSchedule: why it cannot be used).

    ``parts``: a cache of the parsed schedules and the validated rest of the entry (task,
    arguments, options, policy), by their stored text, so that the many rows sharing a
    cron expression or a payload are parsed and validated once (the name is checked for
    each row).
    """
    parts = {} if parts is None else parts
    if len(parts) >= PART_CACHE:
        parts.clear()
    schedule_key = ("schedule", str(row.schedule))
    rest_key = ("rest", *stored_entry(row))
    schedule, rest = parts.get(schedule_key), parts.get(rest_key)
    try:
        if schedule is None:
            schedule = schedule_from_dict(decode_json(row.schedule, "schedule"))
        if rest is not None:
            # The rest of the entry was validated from the same stored text: only the
            # name (and, above, the schedule) are this row's own.
            parts[schedule_key] = schedule
            spec = replace(rest, name=validate_name(row.name), schedule=schedule)
            return spec, _payload(spec)
        args, kwargs, options = (
            decode_json(row.args, "args"),
            decode_json(row.kwargs, "kwargs"),
            decode_json(row.options, "options"),
        )
    except ValueError as exc:
        if isinstance(exc, GafferError):
            raise
        raise GafferError(f"schedule/args/kwargs/options: undecodable JSON ({exc})") from exc
    spec = validate_entry(
        name=row.name,
        task=row.task,
        schedule=schedule,
        args=args,
        kwargs=kwargs,
        options=options,
        gaffer={
            "catchup": row.catchup,
            "overlap": row.overlap,
            "starting_deadline": row.starting_deadline,
            "grace": row.grace,
            "start_at": row.start_at,
            "end_at": row.end_at,
            "max_runs": row.max_runs,
            "ping_url": row.ping_url,
            "skip_on": decode_json(row.skip_on, "skip_on"),
            "on_skip": row.on_skip,
        },
    )
    parts[schedule_key] = schedule
    parts[rest_key] = spec
    return spec, _payload(spec)


def stored_entry(row: DueSchedule) -> tuple[Any, ...]:
    """A row's stored entry but its name and schedule, as stored: what its payload and
    policy are validated from (a cache key)."""
    return (
        row.task, str(row.args), str(row.kwargs), str(row.options), row.catchup,
        row.overlap, row.starting_deadline, row.grace, row.start_at, row.end_at,
        row.max_runs, row.ping_url, None if row.skip_on is None else str(row.skip_on),
        row.on_skip,
    )  # fmt: skip


def _payload(spec: ScheduleSpec) -> Payload:
    policy = spec.policy
    return Payload(
        spec.task,
        spec.args,
        spec.kwargs,
        spec.options,
        policy.overlap,
        ping_url=policy.ping_url,
        jitter=getattr(spec.schedule, "jitter", None),
        catchup=str(policy.catchup),
    )


def log_decision(row: DueSchedule, decision: Decision) -> None:
    for nominal in decision.missed:
        logger.warning(
            "fire %s is older than its starting deadline: recorded as missed",
            fire_key(row.name, nominal),
            extra={"action": "fire_missed", "schedule": row.name},
        )
    if decision.skipped:
        logger.warning(
            "schedule %s: %s%d missed fires not sent (catch-up policy %r)",
            row.name,
            "at least " if decision.skipped_at_least else "",
            decision.skipped,
            row.catchup,
            extra={"action": "fires_skipped", "schedule": row.name},
        )
