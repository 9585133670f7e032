"""Edits of a schedule's timing: which new schedule an ``update`` asks for.

Pure logic, no I/O: :class:`ScheduleChanges` are the fields ``ScheduleStore.update``
takes, and :func:`new_timing` builds the changed schedule from the stored one, keeping
whatever the change does not name (the zone, the jitter, an interval's phase).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from typing import Any, TypedDict

from ..exceptions import InvalidInput
from .kinds import At, Cron, Every, Schedule, as_schedule


class ScheduleChanges(TypedDict, total=False):
    """What :meth:`ScheduleStore.update` may change; a field not given is kept."""

    task: str
    #: A whole new schedule: ``cron(...)``, ``every(...)``, seconds or a timedelta.
    schedule: Any
    #: A new cron expression in the current zone with the current jitter (a schedule
    #: that was ``every`` becomes a cron schedule in UTC, unless ``tz`` is given too).
    cron: str
    #: A new interval in seconds, with the current jitter (and phase, if it was ``every``).
    every: float | timedelta
    #: The zone of the cron schedule; refused for an ``every`` schedule.
    tz: str
    #: The schedule's jitter, in seconds.
    jitter: float | timedelta
    args: Any
    kwargs: Any
    options: Any
    #: Merged into the current ``gaffer`` options (``catchup``, ``overlap``, ...).
    gaffer: Mapping[str, Any]


def new_timing(name: str, current: Schedule | None, changes: ScheduleChanges) -> Schedule | None:
    """The schedule ``changes`` ask for, built from ``current`` (None: timing unchanged)."""
    given = [key for key in ("schedule", "cron", "every") if key in changes]
    if len(given) > 1:
        raise InvalidInput(f"{given[1]}: give only one of schedule, cron or every", field=given[1])
    if not given and "tz" not in changes and "jitter" not in changes:
        return None
    start = as_schedule(changes["schedule"]) if "schedule" in changes else current
    jitter = changes.get("jitter", 0.0 if start is None else start.jitter)
    if isinstance(start, At) and not ({"cron", "every"} & set(changes)):
        if "tz" in changes or changes.get("jitter"):
            field = "tz" if "tz" in changes else "jitter"
            raise InvalidInput(
                f"{field}: an at schedule fires at one instant: it has no zone or jitter to "
                "change (give a new schedule)",
                field=field,
            )
        return start
    if "cron" in changes:
        zone = start.tz if isinstance(start, Cron) else "UTC"
        return Cron(changes["cron"], changes.get("tz", zone), jitter=jitter)
    if "tz" in changes and ("every" in changes or not isinstance(start, Cron)):
        if "every" in changes:
            why = "an interval makes it an every schedule"
        elif isinstance(start, Every):
            why = f"schedule {name!r} is an every schedule (give a cron expression too)"
        else:
            why = f"the stored schedule of {name!r} cannot be read (give a cron expression too)"
        raise InvalidInput(f"tz: a zone applies only to a cron schedule; {why}", field="tz")
    if "every" in changes:
        anchor = start.anchor if isinstance(start, Every) else None
        return Every(changes["every"], anchor=anchor, jitter=jitter)
    if isinstance(start, Cron):
        return Cron(start.expr, changes.get("tz", start.tz), jitter=jitter)
    if isinstance(start, Every):
        return Every(start.interval, anchor=start.anchor, jitter=jitter)
    raise InvalidInput(
        f"schedule: the stored schedule of {name!r} cannot be read; give a whole new one",
        field="schedule",
    )
