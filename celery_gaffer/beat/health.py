"""Late and failing schedules: the alerting rules (docs/how-to/alerting.md).

A schedule is **late** when its most recent nominal fire ``F`` with ``F + grace <= now``
has no succeeded run for a nominal time ``>= F``; **failing** after
``gaffer_alert_after_failures`` consecutive failed (or lost) runs. The run recorder keeps
``last_success_nominal_at`` and ``consecutive_failures`` on the schedule row, so a check
is a few indexed reads. Beat re-checks only the rows whose ``check_at`` has passed (the
next fire's grace expiry, or at once after a run ends), logs each change once at ERROR,
sends :mod:`celery_gaffer.signals` and, with ``gaffer_alert_webhook_url`` set, writes the
change's alert to the outbox in the same transaction (:mod:`.alerts`).
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from typing import Any

from sqlalchemy import Connection

from ..exceptions import GafferError, one_line
from ..protocol import STORED_HEALTH
from ..protocol import Health as State
from ..schedules.bounds import Bounds, Window
from ..schedules.calendars import CalendarRule, stored_rule
from ..schedules.kinds import Schedule, schedule_from_dict
from ..settings import GafferSettings
from ..signals import job_failing, job_late, job_recovered
from ..store import alerts, schedule_health
from ..store import fires as ledger
from ..store.calendars import load_calendars
from ..store.database import Database
from ..store.models import Models
from ..store.schedule_rows import decode_json

logger = logging.getLogger("celery_gaffer.health")

#: Most schedules whose health one transaction re-checks.
CHECK_BATCH = 250
# The states stored on a row (the ``health`` column) and pushed to the webhook on change.
ALERT_STATES = (*STORED_HEALTH, State.ERROR)


@dataclass(frozen=True, slots=True)
class Health:
    """A schedule's state word and the facts behind it.

    ``state`` is ``ok``, ``late``, ``failing``, ``paused`` or ``error``;
    ``due_nominal_at`` is the fire that is late, ``consecutive_failures`` the failed
    runs in a row, ``error`` why the schedule is in error (else None).
    """

    schedule: str
    state: str  # a Health word: ok | late | failing | paused | error
    due_nominal_at: datetime | None
    last_success_at: datetime | None
    last_success_nominal_at: datetime | None
    next_fire_at: datetime | None
    consecutive_failures: int
    error: str | None = None

    @property
    def reason(self) -> str:
        """Why the state is what it is, in a few words ("" when ok or paused)."""
        if self.state == State.ERROR:
            return self.error or ""
        if self.state == State.LATE and self.due_nominal_at is not None:
            return f"fire of {self.due_nominal_at:%Y-%m-%dT%H:%M:%SZ} has not succeeded"
        if self.state == State.FAILING:
            return f"{self.consecutive_failures} consecutive failed runs"
        return ""

    @property
    def alerting(self) -> bool:
        return self.state in (State.LATE, State.FAILING, State.ERROR)


#: ``ledger_latest`` not looked up yet (:func:`latest_due_fire` queries the ledger).
UNKNOWN: Any = object()

#: Gives the stored calendars' dates by name (read once for many rows).
Calendars = Callable[[], Mapping[str, frozenset[date]]]


def latest_due_fire(
    conn: Connection,
    models: Models,
    name: str,
    schedule: Schedule | Window,
    watermark: datetime,
    until: datetime,
    ledger_latest: Any = UNKNOWN,
) -> datetime | None:
    """The most recent nominal fire ``<= until`` since the schedule was created.

    Fires up to the watermark are in the ledger (those a catch-up policy dropped were
    older than one that is); later ones, when Beat is behind, come from the schedule.
    ``ledger_latest``: the ledger's newest nominal time ``<= until``, when the caller
    looked it up already (for a batch of rows at once).
    """
    newest: datetime | None = (
        ledger.latest_nominal(conn, models, name, until)
        if ledger_latest is UNKNOWN
        else ledger_latest
    )
    if until > watermark:
        # Looked up from ``until`` back: the cost does not grow with how far behind Beat is.
        last = schedule.last_at_or_before(until)
        if last is not None and last > watermark:
            newest = last
    return newest


def _facts(row: Mapping[Any, Any]) -> dict[str, Any]:
    """What a Health reports of a row whatever its state."""
    return {
        "schedule": row["name"],
        "last_success_at": row["last_success_at"],
        "last_success_nominal_at": row["last_success_nominal_at"],
        "next_fire_at": row["next_fire_at"],
        "consecutive_failures": int(row["consecutive_failures"] or 0),
    }


def evaluate(
    conn: Connection,
    models: Models,
    row: Mapping[Any, Any],
    now: datetime,
    settings: GafferSettings,
    ledger_latest: Any = UNKNOWN,
    calendars: Calendars | None = None,
) -> tuple[Health, datetime | None]:
    """The health of one schedule row, and when it should next be checked
    (``ledger_latest``: see :func:`latest_due_fire`; ``calendars``: the stored calendars,
    read for this row alone when None)."""
    facts = _facts(row)
    if row["error"]:
        return Health(state=State.ERROR, due_nominal_at=None, error=row["error"], **facts), None
    try:
        schedule = schedule_from_dict(decode_json(row["schedule"]))
    except (ValueError, TypeError) as exc:
        return Health(state=State.ERROR, due_nominal_at=None, error=str(exc), **facts), None
    if not row["enabled"]:
        return Health(state=State.PAUSED, due_nominal_at=None, **facts), None
    grace = _grace(row, settings)
    # A bounded schedule is expected to fire only inside its bounds.
    # Fires its calendars skip are not expected (never late).
    calendar = _calendar(conn, models, row, calendars)
    bounds = Bounds(row["start_at"], row["end_at"], row["max_runs"], calendar)
    window = bounds.window(schedule, fired=row["fired_count"], watermark=row["watermark_at"])
    due = latest_due_fire(
        conn, models, row["name"], window, row["watermark_at"], now - grace, ledger_latest
    )
    success = row["last_success_nominal_at"]
    late = due is not None and (success is None or success < due)
    failing = facts["consecutive_failures"] >= settings.alert_after_failures
    state = State.FAILING if failing else State.LATE if late else State.OK
    following = window.next_after(now - grace)
    check_at = None if following is None else following + grace
    return Health(state=state, due_nominal_at=due, **facts), check_at


def _rule(row: Mapping[Any, Any]) -> CalendarRule | None:
    try:
        return stored_rule(decode_json(row.get("skip_on")), row.get("on_skip"))
    except ValueError:
        return None


def _calendar(
    conn: Connection, models: Models, row: Mapping[Any, Any], calendars: Calendars | None
) -> CalendarRule | None:
    rule = _rule(row)
    if rule is None or not rule.stored_names:
        return rule
    try:
        if calendars is None:
            return rule.with_stored(load_calendars(conn, models, rule.stored_names))
        return rule.with_stored(calendars())
    except GafferError:  # removed since: Beat puts the schedule in error on its next fire
        return rule


def calendars_of(conn: Connection, models: Models, rows: Iterable[Mapping[Any, Any]]) -> Calendars:
    """The stored calendars the rows name, read at once in one statement (none when no
    row names one)."""
    names = {name for row in rows for name in (_rule(row) or _NO_RULE).stored_names}
    found = load_calendars(conn, models, names) if names else {}
    return lambda: found


_NO_RULE = CalendarRule(())


def _grace(row: Mapping[Any, Any], settings: GafferSettings) -> timedelta:
    return timedelta(seconds=row["grace"] if row["grace"] is not None else settings.default_grace)


def _ledger_bounds(
    rows: list[Mapping[Any, Any]], now: datetime, settings: GafferSettings
) -> list[tuple[str, datetime]]:
    """``(name, now - grace)`` of each row whose evaluation reads the ledger (a row whose
    grace cannot be used is left to :func:`evaluate_safely`, which reports it)."""
    bounds = []
    for row in rows:
        if row["enabled"] and not row["error"]:
            try:
                bounds.append((row["name"], now - _grace(row, settings)))
            except (OverflowError, TypeError, ValueError):
                continue
    return bounds


def check_due(
    conn: Connection, models: Models, now: datetime, settings: GafferSettings, limit: int
) -> list[tuple[Health, str]]:
    """Re-evaluate the schedules whose ``check_at`` has passed; return (health, previous).

    The ledger is read once for the whole batch and the results written in one
    statement: a second's worth of checks costs a few round trips, not two a schedule.
    """
    rows = schedule_health.lock_due_checks(conn, models, now, limit)
    latest = ledger.latest_nominals(conn, models, _ledger_bounds(rows, now, settings))
    calendars = calendars_of(conn, models, rows)
    results = []
    changes = []
    for row in rows:
        health, check_at = evaluate_safely(
            conn, models, row, now, settings, latest.get(row["name"], UNKNOWN), calendars
        )
        # Also "error", so that an error and its end are changes; a paused schedule
        # is stored ok, and never alerted.
        watched = row["enabled"] and health.state in ALERT_STATES
        stored = health.state if watched else State.OK
        changes.append((row["name"], str(stored), check_at))
        if settings.alert_webhook_url is not None and watched and stored != row["health"]:
            body = alert_body(health, row["health"], now)
            alerts.add_alert(conn, models, health.schedule, body, now)
        results.append((health, row["health"]))
    schedule_health.set_healths(conn, models, changes)
    return results


def check_due_within(
    database: Database, now: datetime, budget: float, limit: int
) -> list[tuple[Health, str]]:
    """:func:`check_due` in transactions of at most :data:`CHECK_BATCH` (and ``limit``)
    rows, starting none after ``budget`` seconds: the rest stay due for the next call."""
    started, size = time.monotonic(), min(CHECK_BATCH, limit)
    results: list[tuple[Health, str]] = []
    while True:
        with database.begin() as conn:
            checked = check_due(conn, database.models, now, database.settings, size)
        results += checked
        if len(checked) < size or time.monotonic() - started > budget:
            return results


def _iso(moment: datetime | None) -> str | None:
    return None if moment is None else moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def alert_body(health: Health, previous: str, now: datetime) -> dict[str, Any]:
    """The JSON body of the webhook alert of one change (schema: docs/how-to/alerting.md)."""
    return {
        "alert_id": str(uuid.uuid4()),
        "schedule": health.schedule,
        "state": str(health.state),
        "previous": str(previous),
        "reason": health.reason,
        "at": _iso(now),
        "due_nominal_at": _iso(health.due_nominal_at),
        "consecutive_failures": health.consecutive_failures,
    }


def announce(health: Health, previous: str) -> None:
    """Log a change of state once at ERROR and send its signal (an error is logged
    where it is found, and has no signal: it counts as ``ok`` here)."""
    if previous == State.ERROR:
        previous = State.OK
    if health.state == previous or health.state not in STORED_HEALTH:
        return
    if health.state == State.LATE:
        signal, action = job_late, "job_late"
        message = "schedule %s is late: its fire of %s has not succeeded"
        detail: Any = health.due_nominal_at
    elif health.state == State.FAILING:
        signal, action = job_failing, "job_failing"
        message = "schedule %s is failing: %s consecutive failed runs"
        detail = health.consecutive_failures
    else:
        signal, action = job_recovered, "job_recovered"
        message = "schedule %s recovered (%s)"
        detail = f"was {previous}"
    logger.error(
        message, health.schedule, detail, extra={"action": action, "schedule": health.schedule}
    )
    signal.send(sender=health.schedule, health=health, previous=previous)


def all_health(
    conn: Connection,
    models: Models,
    now: datetime,
    settings: GafferSettings,
    limit: int | None = None,
) -> list[Health]:
    """The live health of every schedule, by name (what ``gaffer status`` prints)."""
    rows = schedule_health.health_rows(conn, models, limit)
    calendars = calendars_of(conn, models, rows)
    return [
        evaluate_safely(conn, models, row, now, settings, calendars=calendars)[0] for row in rows
    ]


def evaluate_safely(
    conn: Connection,
    models: Models,
    row: Mapping[Any, Any],
    now: datetime,
    settings: GafferSettings,
    ledger_latest: Any = UNKNOWN,
    calendars: Calendars | None = None,
) -> tuple[Health, datetime | None]:
    """:func:`evaluate`, with any failure of one row reported as that row's ``error``
    (a row written by hand or by an older version must not stop Beat or ``status``)."""
    try:
        return evaluate(conn, models, row, now, settings, ledger_latest, calendars)
    except Exception as exc:  # noqa: BLE001 - isolated to its schedule
        error = f"health: {one_line(exc)}"
        failure = Health(state=State.ERROR, due_nominal_at=None, error=error, **_facts(row))
        return failure, None
