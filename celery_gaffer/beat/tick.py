"""One Beat tick: due fires into the ledger and out to the broker, then health.

The data path of a tick, in order:

1. :meth:`Tick.dispatch_due`: claim the schedules whose ``next_fire_at`` has passed
   (an index), decide their fires from the persisted watermark (:mod:`.catchup`, pure),
   insert them into the ledger and advance the watermarks in one transaction, then
   publish after commit (:mod:`.publisher`);
2. :meth:`Tick.publish_pending`: publish the pending fires whose time has come (jittered
   fires, and fires whose publisher died between commit and publish);
3. :meth:`Tick.confirm_deliveries`: publish again the sent fires no worker ever started
   (opt-in, :mod:`.redelivery`);
4. :meth:`Tick.check_health`: mark runs whose heartbeat stopped ``lost`` and re-check the
   health of the schedules whose ``check_at`` has passed (:mod:`.health`), then POST
   the due webhook alerts of health changes (:mod:`.alerts`).

Several Beats may run at once: the ledger's unique ``(schedule, nominal_at)`` and row
locks make each fire sent once.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

from sqlalchemy import Connection

from ..clock import Clock
from ..exceptions import GafferError
from ..protocol import FireKind, FireState, RunState, fire_key, fire_task_id
from ..schedules.bounds import Window
from ..schedules.kinds import Schedule, schedule_from_dict
from ..schedules.spec import ScheduleSpec, validate_entry
from ..store import Database
from ..store import fires as ledger
from ..store import runs as run_rows
from ..store import schedules as schedule_rows
from ..store.fires import Fire, NewFire
from ..store.models import Models
from ..store.schedule_rows import decode_json
from ..store.schedules import DueSchedule, Payload, Probe
from .alerts import send_due
from .catchup import Decision, decide
from .health import announce, check_due
from .metrics import Metrics
from .publisher import publish
from .redelivery import claim_unconfirmed

logger = logging.getLogger("celery_gaffer.scheduler")

# Most times one fire is published when delivery confirmation finds it never started.
MAX_PUBLISHES = 4
# Parsed schedules and payloads kept between ticks (the due ones of a busy tick fit).
PARSED_CACHE = 2_000
# How soon Beat loads a schedule in error again, to see whether its cause is gone.
ERROR_RECHECK = timedelta(seconds=60)
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


@dataclass(frozen=True, slots=True)
class RowPlan:
    """What a tick writes for one due schedule (see :func:`plan_row`)."""

    fires: list[NewFire]
    missed_runs: list[dict[str, Any]]
    change: dict[str, Any]


def plan_row(
    row: DueSchedule,
    schedule: Schedule | Window,
    decision: Decision,
    now: datetime,
    republish_at: datetime,
) -> RowPlan:
    """The ledger rows, ``missed`` run rows and watermark change of one decided schedule.

    A fire due now is inserted as published once (``publish_count`` 1, to be republished
    after ``republish_at`` if its publisher dies); a jittered one later is inserted
    unpublished, to be sent when its ``publish_after`` comes.
    """
    fires: list[NewFire] = []
    for nominal in decision.send:
        key = fire_key(row.name, nominal)
        send_at = schedule.send_at(key, nominal)
        if send_at <= now:
            fires.append(
                NewFire(
                    row.name, nominal, FireKind.SCHEDULED, FireState.PENDING, republish_at, 1, key
                )
            )
        else:
            fires.append(
                NewFire(row.name, nominal, FireKind.SCHEDULED, FireState.PENDING, send_at, 0, key)
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
    return RowPlan(fires, missed_runs, change)


def _recount(row: DueSchedule, spec: ScheduleSpec, change: dict[str, Any]) -> None:
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


@dataclass
class Tick:
    """The tick of one Beat: the work of ``Scheduler.tick``, without Celery's interface."""

    app: Any
    database: Database
    clock: Clock
    #: The Beat's producer (Celery makes it on first use).
    producer: Callable[[], Any]
    #: Schedules (and pending fires) handled per transaction.
    batch_size: int = 1000
    #: Longest a tick keeps dispatching before it lets Beat's loop run (it returns 0).
    tick_budget: float = 1.0
    metrics: Metrics | None = None
    _parsed: dict[tuple[Any, ...], tuple[ScheduleSpec, Payload]] = field(default_factory=dict)
    _reported_errors: set[tuple[str, str]] = field(default_factory=set)
    _next_lost_sweep: float = 0.0
    #: When an unsent alert is next due (None: none waiting); unknown at start.
    _alerts_at: datetime | None = field(default_factory=lambda: _EPOCH)

    @property
    def models(self) -> Models:
        return self.database.models

    def run(self, max_interval: float) -> float:
        """Do every kind of work that is due; the seconds until the next is due."""
        settings = self.database.settings
        now = self.clock()
        current = self.probe()
        fires, checks, pending, confirms = current.due(now)
        busy = worked = False
        if fires or pending or confirms:
            worked = True
            started = time.monotonic()
            while True:
                busy = self.dispatch_due(now, max_interval)
                busy = self.publish_pending(now) or busy
                busy = self.confirm_deliveries(now) or busy
                if not busy or time.monotonic() - started > self.tick_budget:
                    break
                now = self.clock()
        alerts_due = self._alerts_at is not None and self._alerts_at <= self.clock()
        if checks or alerts_due or time.monotonic() >= self._next_lost_sweep:
            worked = True
            self.check_health(self.clock())
        if busy:
            return 0.0
        if worked:
            current = self.probe()
        wake_at = current.earliest()
        delay = float(max_interval)
        if wake_at is not None:
            delay = min(delay, (wake_at - self.clock()).total_seconds())
        if self._alerts_at is not None and settings.alert_webhook_url is not None:
            delay = min(delay, (self._alerts_at - self.clock()).total_seconds())
        delay = min(delay, self._next_lost_sweep - time.monotonic(), settings.lease_ttl / 3)
        return max(0.0, delay)

    def probe(self) -> Probe:
        confirm = self.database.settings.confirm_delivery_after is not None
        with self.database.autocommit() as conn:
            return schedule_rows.probe(conn, self.models, confirm=confirm)

    def dispatch_due(self, now: datetime, max_interval: float) -> bool:
        """Decide, record and publish the fires of the schedules due now; True: a full
        batch (call again)."""
        settings = self.database.settings
        on_time = timedelta(seconds=max(2 * float(max_interval), 10.0))
        republish_at = now + timedelta(seconds=settings.republish_after)
        with self.database.begin() as conn:
            due = schedule_rows.claim_due_schedules(conn, self.models, now, self.batch_size)
            if not due:
                return False
            plans: list[RowPlan] = []
            changes: list[dict[str, Any]] = []
            bounded: dict[str, tuple[DueSchedule, ScheduleSpec, dict[str, Any]]] = {}
            payloads: dict[str, Payload] = {}
            for row in due:
                # Whatever one row holds, only that schedule goes to error: the others
                # of the batch, and Beat, go on.
                try:
                    spec, payload = self._usable(row)
                    bounds = spec.policy.bounds
                    window = bounds.window(
                        spec.schedule, fired=row.fired_count, watermark=row.watermark_at
                    )
                    decision = decide(
                        window,
                        spec.policy,
                        row.watermark_at,
                        now,
                        max_catchup=settings.max_catchup,
                        on_time=on_time,
                        runs_left=bounds.runs_left(row.fired_count),
                    )
                    plan = plan_row(row, window, decision, now, republish_at)
                except Exception as exc:  # noqa: BLE001 - isolated to its schedule
                    changes.append(self._error_change(row, exc, now))
                    continue
                self._note_recovery(row)
                _log_decision(row, decision)
                plans.append(plan)
                changes.append(plan.change)
                if spec.policy.bounds.max_runs is not None:
                    bounded[row.name] = (row, spec, plan.change)
                payloads[row.name] = payload
            new_fires = [fire for plan in plans for fire in plan.fires]
            inserted = ledger.insert_fires(conn, self.models, new_fires, now)
            # What max_runs counts: the fires this tick really added (a fire already in
            # the ledger, from a backfill of the same time say, is not sent again).
            sent = Counter(fire.schedule for fire in inserted)
            for plan in plans:
                if plan.fires:
                    plan.change["sent"] = sent.get(plan.fires[0].schedule, 0)
            for row, spec, change in bounded.values():
                _recount(row, spec, change)
            schedule_rows.advance_schedules(conn, self.models, changes)
            recovered = [row.name for row in due if row.error is not None and row.name in payloads]
            # A schedule newly in error, or out of it, is checked: its health changed.
            errored = [c["id"] for c in changes if c["error"] is not None]
            newly = [row.name for row in due if row.error is None and row.id in errored]
            schedule_rows.request_checks(conn, self.models, recovered + newly)
            run_rows.insert_runs(conn, self.models, [r for plan in plans for r in plan.missed_runs])
        self._publish([fire for fire in inserted if fire.publish_count > 0], payloads)
        return len(due) >= self.batch_size

    def publish_pending(self, now: datetime) -> bool:
        """Publish the pending fires whose ``publish_after`` has passed; True: a full batch."""
        settings = self.database.settings
        with self.database.begin() as conn:
            claimed = ledger.claim_pending(
                conn, self.models, now, settings.republish_after, self.batch_size
            )
            if not claimed:
                return False
            payloads = schedule_rows.load_payloads(
                conn, self.models, {fire.schedule for fire in claimed}
            )
            orphans = [fire.id for fire in claimed if fire.schedule not in payloads]
            ledger.mark_cancelled(conn, self.models, orphans)
        # A schedule in error keeps its pending fires (claimed again after
        # republish_after) until the error clears.
        self._publish([fire for fire in claimed if _sendable(fire, payloads)], payloads)
        return len(claimed) >= self.batch_size

    def confirm_deliveries(self, now: datetime) -> bool:
        """Publish again the sent fires that no worker ever started (opt-in)."""
        settings = self.database.settings
        if settings.confirm_delivery_after is None:
            return False
        with self.database.begin() as conn:
            found = claim_unconfirmed(
                conn,
                self.models,
                now,
                settings.confirm_delivery_after,
                MAX_PUBLISHES,
                self.batch_size,
            )
            again = found.again
            payloads = schedule_rows.load_payloads(
                conn, self.models, {fire.schedule for fire in again}
            )
        for key in found.given_up:
            logger.error(
                "fire %s was published %d times and never started; giving up",
                key,
                MAX_PUBLISHES,
                extra={"action": "fire_unconfirmed", "key": key},
            )
        self._publish([fire for fire in again if _sendable(fire, payloads)], payloads)
        return found.handled >= self.batch_size

    def check_health(self, now: datetime) -> None:
        """Mark runs whose heartbeat stopped ``lost``, re-check due schedules' health."""
        settings = self.database.settings
        sweep = time.monotonic() >= self._next_lost_sweep
        if sweep:
            # Heartbeats beat every third of the TTL; looking as often finds a lost run
            # within a TTL and a third, without a query on every tick.
            self._next_lost_sweep = time.monotonic() + settings.lease_ttl / 3
        with self.database.begin() as conn:
            lost = sweep_lost(conn, self.models, settings.lease_ttl) if sweep else []
            changes = check_due(conn, self.models, now, settings, self.batch_size)
            if self.metrics is not None:
                self.metrics.observe_runs(conn, self.models, now)
        for run_id, schedule in lost:
            logger.error(
                "run %s of %s is lost: its heartbeat stopped (worker killed?)",
                run_id,
                schedule or "-",
                extra={"action": "run_lost", "schedule": schedule},
            )
        for health, previous in changes:
            announce(health, previous)
            if self.metrics is not None:
                self.metrics.observe_health(health)
        # After the changes' commit, so a change's alert goes out on the tick that saw it.
        self._alerts_at = send_due(self.database, settings, self.clock)

    def _publish(self, fires: list[Fire], payloads: dict[str, Payload]) -> None:
        if not fires:
            return
        published = publish(self.app, self.database, fires, payloads, self.producer(), self.clock)
        if published.refused:
            for name, reason in published.refused.items():
                self._report_error(name, reason)
            with self.database.begin() as conn:
                # Not loaded again by itself: the row validates, so each recheck would
                # add a fire the broker refuses again. Fixing its options (update,
                # --replace) or resuming it clears the error; its pending fires wait.
                schedule_rows.mark_errors(conn, self.models, published.refused, None)
        if self.metrics is not None:
            now = self.clock()
            for fire in published.sent:
                self.metrics.fire_lag.observe(max(0.0, (now - fire.nominal_at).total_seconds()))

    def _usable(self, row: DueSchedule) -> tuple[ScheduleSpec, Payload]:
        """The validated entry and payload of a row, or an error saying why it is unusable.

        Rows are checked with the same rules as ``ScheduleStore`` (a row written by hand
        or by another version may break them), and the task must be registered with
        this Beat's app. Cached by the row's id and raw column values, so an edited row
        is checked again and an unchanged one is not.
        """
        if row.task not in self.app.tasks:
            raise GafferError(f"task: {row.task!r} is not registered with this Beat's app")
        cache_key = (
            row.id,
            str(row.schedule),
            row.task,
            str(row.args),
            str(row.kwargs),
            str(row.options),
            row.overlap,
            row.catchup,
            row.starting_deadline,
            row.grace,
            row.start_at,
            row.end_at,
            row.max_runs,
            row.ping_url,
        )
        usable = self._parsed.get(cache_key)
        if usable is None:
            usable = usable_row(row)
            if len(self._parsed) >= PARSED_CACHE:
                self._parsed.clear()
            self._parsed[cache_key] = usable
        return usable

    def _error_change(self, row: DueSchedule, exc: Exception, now: datetime) -> dict[str, Any]:
        message = (str(exc) or type(exc).__name__).splitlines()[0][:2000]
        if not isinstance(exc, GafferError):
            message = f"{type(exc).__name__}: {message}"
        self._report_error(row.name, message)
        return {
            "id": row.id,
            "watermark_at": row.watermark_at,
            # Loaded again then: the error clears once its cause is gone.
            "next_fire_at": now + ERROR_RECHECK,
            "error": message,
            "sent": 0,
        }

    def _report_error(self, name: str, message: str) -> None:
        if (name, message) not in self._reported_errors:
            self._reported_errors.add((name, message))
            logger.error(
                "schedule %s cannot be used and is marked in error: %s",
                name,
                message,
                extra={"action": "schedule_error", "schedule": name},
            )

    def _note_recovery(self, row: DueSchedule) -> None:
        if row.error is None:
            return
        self._reported_errors = {(n, m) for n, m in self._reported_errors if n != row.name}
        logger.warning(
            "schedule %s is usable again (was in error: %s)",
            row.name,
            row.error,
            extra={"action": "schedule_recovered", "schedule": row.name},
        )


def usable_row(row: DueSchedule) -> tuple[ScheduleSpec, Payload]:
    """A due row checked with the rules every entry passes before it is written
    (GafferError, or InvalidSchedule: why it cannot be used)."""
    try:
        schedule = schedule_from_dict(decode_json(row.schedule))
        args, kwargs, options = (decode_json(v) for v in (row.args, row.kwargs, row.options))
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
        },
    )
    policy = spec.policy
    payload = Payload(
        row.task, spec.args, spec.kwargs, spec.options, policy.overlap, ping_url=policy.ping_url
    )
    return spec, payload


def _sendable(fire: Fire, payloads: dict[str, Payload]) -> bool:
    payload = payloads.get(fire.schedule)
    return payload is not None and payload.error is None


def sweep_lost(
    conn: Connection, models: Models, stale_after: float
) -> list[tuple[str, str | None]]:
    """Mark ``running`` rows whose heartbeat stopped ``stale_after`` seconds ago ``lost``,
    count each against its schedule, and reopen their fires for delivery confirmation;
    ``(run id, schedule)`` of each."""
    stale = run_rows.mark_stale_lost(conn, models, stale_after)
    for _, schedule, _ in stale:
        if schedule:
            schedule_rows.update_schedule_facts(conn, models, schedule, RunState.LOST, None)
    # With delivery confirmation on, a fire whose run was lost is checked again: if its
    # message went down with the worker and the broker, it is published again.
    ledger.reopen_now(conn, models, [task_id for _, _, task_id in stale])
    return [(str(run_id), schedule) for run_id, schedule, _ in stale]


def _log_decision(row: DueSchedule, decision: Decision) -> None:
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
