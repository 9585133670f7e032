"""The Beat scheduler: ``celery -A proj beat -S gaffer``.

Each tick reads only the schedules whose ``next_fire_at`` has passed (an index), decides
their fires from the persisted watermark, inserts them into the ledger and advances the
watermark in one transaction, and publishes after commit. Several Beats may run at once:
the ledger's unique ``(schedule, nominal_at)`` and row locks make each fire sent once.
"""

from __future__ import annotations

import logging
import time
from datetime import datetime, timedelta
from typing import Any

from celery import beat
from sqlalchemy import insert
from sqlalchemy.exc import DBAPIError

from .catchup import decide
from .clock import Clock, utcnow
from .confirm import claim_unconfirmed
from .exceptions import DatabaseUnavailable, GafferError
from .health import announce, check_due
from .keys import fire_key, fire_task_id
from .ledger import (
    DueSchedule,
    Fire,
    NewFire,
    Payload,
    Probe,
    advance_schedules,
    claim_due_schedules,
    claim_pending,
    decode_json,
    insert_fires,
    load_payloads,
    mark_cancelled,
    probe,
)
from .metrics import Metrics
from .publisher import publish
from .runs import mark_lost
from .schedule_store import ScheduleStore
from .schedules import Cron, Every, schedule_from_dict
from .store import Database, current_revision, database_for, head_revision
from .store.models import table_of
from .validation import Policy

logger = logging.getLogger("celery_gaffer.scheduler")

# Most times one fire is published when delivery confirmation finds it never started.
MAX_PUBLISHES = 4
# Parsed schedules and payloads kept between ticks (the due ones of a busy tick fit).
PARSED_CACHE = 2_000


class Scheduler(beat.Scheduler):  # type: ignore[misc]
    """Celery Beat scheduler whose schedules and tick ledger live in the Gaffer database.

    Safe to build with ``lazy=True`` (nothing is read or written then). ``tick`` sends
    every due fire and returns the seconds until the next one, at most ``max_interval``.
    """

    #: Longest sleep between ticks: an edit made through the CLI or ScheduleStore is
    #: picked up by the next tick, so this bounds how long that takes.
    max_interval = 5.0
    #: Schedules (and pending fires) handled per transaction.
    batch_size = 1000
    #: Longest a tick keeps dispatching before it lets Beat's loop run (it returns 0).
    tick_budget = 1.0

    def __init__(self, app: Any, *args: Any, clock: Clock = utcnow, **kwargs: Any) -> None:
        self._clock = clock
        self.database: Database = database_for(app)
        self._parsed: dict[tuple[Any, ...], tuple[Cron | Every, Payload]] = {}
        self._reported_errors: set[tuple[str, str]] = set()
        self.metrics: Metrics | None = None
        self._failed_ticks = 0
        self._next_lost_sweep = 0.0
        super().__init__(app, *args, **kwargs)

    # -- celery.beat.Scheduler interface ----------------------------------------------

    def setup_schedule(self) -> None:
        """Check the database is migrated and sync ``beat_schedule`` into it (source config)."""
        settings = self.database.settings
        if current_revision(self.database.engine, settings.table_prefix) != head_revision():
            raise GafferError(
                f"the Gaffer database at {settings.masked_url} is not migrated: "
                "run `celery -A <app> gaffer migrate`"
            )
        self.app.loader.import_default_modules()
        ScheduleStore(self.app, clock=self._clock, source="config").sync_config(
            self.app.conf.beat_schedule or {}
        )
        if settings.metrics_port is not None and self.metrics is None:
            # Per-schedule gauges appear as Beat checks each schedule (check_at).
            self.metrics = Metrics(settings.metrics_port)

    def tick(self, *args: Any, **kwargs: Any) -> float:
        """Dispatch every due fire; return the seconds until the next one is due.

        A database that cannot be reached (a restart, a failover) is logged and retried
        on the next tick: Beat keeps running, and the ledger makes the retry safe.
        """
        try:
            delay = self._tick()
        except (DBAPIError, DatabaseUnavailable) as exc:
            self._failed_ticks += 1
            logger.error(
                "tick failed (%s): %s: %s; retrying",
                self.database.settings.masked_url,
                type(exc).__name__,
                str(getattr(exc, "orig", exc)).splitlines()[0][:300],
                extra={"action": "tick_failed"},
            )
            return float(min(self.max_interval, 0.5 * 2 ** min(self._failed_ticks, 4)))
        self._failed_ticks = 0
        return delay

    def _tick(self) -> float:
        settings = self.database.settings
        now = self._clock()
        current = self._probe()
        fires, checks, pending, confirms = current.due(now)
        busy = worked = False
        if fires or pending or confirms:
            worked = True
            started = time.monotonic()
            while True:
                busy = self._dispatch_due(now)
                busy = self._publish_pending(now) or busy
                busy = self._confirm_deliveries(now) or busy
                if not busy or time.monotonic() - started > self.tick_budget:
                    break
                now = self._clock()
        if checks or time.monotonic() >= self._next_lost_sweep:
            worked = True
            self._check_health(self._clock())
        if busy:
            return 0.0
        if worked:
            current = self._probe()
        wake_at = current.earliest()
        delay = float(self.max_interval)
        if wake_at is not None:
            delay = min(delay, (wake_at - self._clock()).total_seconds())
        delay = min(delay, self._next_lost_sweep - time.monotonic(), settings.lease_ttl / 3)
        return max(0.0, delay)

    def _probe(self) -> Probe:
        confirm = self.database.settings.confirm_delivery_after is not None
        with self.database.autocommit() as conn:
            return probe(conn, self.database.models, confirm=confirm)

    def sync(self) -> None:
        """Nothing to do: every tick's state is committed as it happens."""

    def close(self) -> None:
        super().close()
        if self.metrics is not None:
            self.metrics.close()
            self.metrics = None

    @property
    def info(self) -> str:
        settings = self.database.settings
        return f"    . database -> {settings.masked_url}\n    . tables -> {settings.table_prefix}*"

    @property
    def schedule(self) -> dict[str, Any]:
        # Schedules live in the database; Celery's in-memory dict stays empty.
        return {}

    @schedule.setter
    def schedule(self, value: Any) -> None:
        pass

    # -- the tick ---------------------------------------------------------------------

    def _dispatch_due(self, now: datetime) -> bool:
        settings = self.database.settings
        models = self.database.models
        on_time = timedelta(seconds=max(2 * float(self.max_interval), 10.0))
        republish_at = now + timedelta(seconds=settings.republish_after)
        with self.database.begin() as conn:
            due = claim_due_schedules(conn, models, now, self.batch_size)
            if not due:
                return False
            new_fires: list[NewFire] = []
            changes: list[dict[str, Any]] = []
            payloads: dict[str, Payload] = {}
            missed_runs: list[dict[str, Any]] = []
            for row in due:
                try:
                    schedule, payload = self._usable(row)
                except (GafferError, ValueError, TypeError) as exc:
                    changes.append(self._error_change(row, exc))
                    continue
                policy = Policy(catchup=row.catchup, starting_deadline=row.starting_deadline)
                decision = decide(
                    schedule,
                    policy,
                    row.watermark_at,
                    now,
                    max_catchup=settings.max_catchup,
                    on_time=on_time,
                )
                for nominal in decision.send:
                    key = fire_key(row.name, nominal)
                    send_at = schedule.send_at(key, nominal)
                    if send_at <= now:
                        new_fires.append(
                            NewFire(row.name, nominal, "scheduled", "pending", republish_at, 1, key)
                        )
                    else:
                        new_fires.append(
                            NewFire(row.name, nominal, "scheduled", "pending", send_at, 0, key)
                        )
                for nominal in decision.missed:
                    new_fires.append(NewFire(row.name, nominal, "scheduled", "missed", now, 0))
                    missed_runs.append(missed_run(row.name, row.task, nominal, now))
                    logger.warning(
                        "fire %s is older than its starting deadline: recorded as missed",
                        fire_key(row.name, nominal),
                        extra={"action": "fire_missed", "schedule": row.name},
                    )
                if decision.skipped:
                    logger.warning(
                        "schedule %s: %d missed fires not sent (catch-up policy %r)",
                        row.name,
                        decision.skipped,
                        row.catchup,
                        extra={"action": "fires_skipped", "schedule": row.name},
                    )
                payloads[row.name] = payload
                changes.append(
                    {
                        "b_id": row.id,
                        "watermark_at": decision.watermark,
                        "next_fire_at": decision.next_fire_at,
                        "error": None,
                    }
                )
            inserted = insert_fires(conn, models, new_fires, now)
            advance_schedules(conn, models, changes)
            if missed_runs:
                conn.execute(insert(table_of(models.JobRun)), missed_runs)
        to_send = [fire for fire in inserted if fire.publish_count > 0]
        self._publish(to_send, payloads)
        return len(due) >= self.batch_size

    def _publish_pending(self, now: datetime) -> bool:
        settings = self.database.settings
        models = self.database.models
        with self.database.begin() as conn:
            claimed = claim_pending(conn, models, now, settings.republish_after, self.batch_size)
            if not claimed:
                return False
            payloads = load_payloads(conn, models, {fire.schedule for fire in claimed})
            orphans = [fire.id for fire in claimed if fire.schedule not in payloads]
            mark_cancelled(conn, models, orphans)
        self._publish([fire for fire in claimed if fire.schedule in payloads], payloads)
        return len(claimed) >= self.batch_size

    def _confirm_deliveries(self, now: datetime) -> bool:
        """Publish again the sent fires that no worker ever started (opt-in)."""
        settings = self.database.settings
        if settings.confirm_delivery_after is None:
            return False
        models = self.database.models
        with self.database.begin() as conn:
            found = claim_unconfirmed(
                conn, models, now, settings.confirm_delivery_after, MAX_PUBLISHES, self.batch_size
            )
            again = found.again
            payloads = load_payloads(conn, models, {fire.schedule for fire in again})
        for key in found.given_up:
            logger.error(
                "fire %s was published %d times and never started; giving up",
                key,
                MAX_PUBLISHES,
                extra={"action": "fire_unconfirmed", "key": key},
            )
        self._publish([fire for fire in again if fire.schedule in payloads], payloads)
        return found.handled >= self.batch_size

    def _publish(self, fires: list[Fire], payloads: dict[str, Payload]) -> None:
        if not fires:
            return
        sent = publish(self.app, self.database, fires, payloads, self.producer, self._clock)
        if self.metrics is not None:
            now = self._clock()
            for fire in sent:
                self.metrics.fire_lag.observe(max(0.0, (now - fire.nominal_at).total_seconds()))

    def _check_health(self, now: datetime) -> None:
        """Mark runs whose heartbeat stopped ``lost``, re-check due schedules' health."""
        settings = self.database.settings
        models = self.database.models
        sweep = time.monotonic() >= self._next_lost_sweep
        if sweep:
            # Heartbeats beat every third of the TTL; looking as often finds a lost run
            # within a TTL and a third, without a query on every tick.
            self._next_lost_sweep = time.monotonic() + settings.lease_ttl / 3
        with self.database.begin() as conn:
            lost = mark_lost(conn, models, settings.lease_ttl) if sweep else []
            changes = check_due(conn, models, now, settings, self.batch_size)
            if self.metrics is not None:
                self.metrics.observe_runs(conn, models, now)
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

    def _usable(self, row: DueSchedule) -> tuple[Cron | Every, Payload]:
        """The parsed schedule and payload of a row, or an error saying why it is unusable.

        Both are cached by the row's id and raw column values, so an edited row is
        parsed again and an unchanged one is not.
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
        )
        usable = self._parsed.get(cache_key)
        if usable is None:
            usable = self._parse(row)
            if len(self._parsed) >= PARSED_CACHE:
                self._parsed.clear()
            self._parsed[cache_key] = usable
        return usable

    @staticmethod
    def _parse(row: DueSchedule) -> tuple[Cron | Every, Payload]:
        schedule = schedule_from_dict(decode_json(row.schedule))
        try:
            args, kwargs, options = (decode_json(v) for v in (row.args, row.kwargs, row.options))
        except ValueError as exc:
            raise GafferError(f"args/kwargs/options: undecodable JSON ({exc})") from exc
        if (
            not isinstance(args, list)
            or not isinstance(kwargs, dict)
            or not isinstance(options, dict)
        ):
            raise GafferError("args/kwargs/options: expected a list and two objects")
        return schedule, Payload(row.task, args, kwargs, options, row.overlap)

    def _error_change(self, row: DueSchedule, exc: Exception) -> dict[str, Any]:
        message = str(exc) or type(exc).__name__
        if (row.name, message) not in self._reported_errors:
            self._reported_errors.add((row.name, message))
            logger.error(
                "schedule %s cannot be used and is marked in error: %s",
                row.name,
                message,
                extra={"action": "schedule_error", "schedule": row.name},
            )
        return {
            "b_id": row.id,
            "watermark_at": row.watermark_at,
            "next_fire_at": None,
            "error": message,
        }


def missed_run(schedule: str, task: str, nominal: datetime, now: datetime) -> dict[str, Any]:
    """The ``gaffer_job_runs`` row of a fire recorded as missed (never sent)."""
    key = fire_key(schedule, nominal)
    return {
        "task_id": fire_task_id(key),
        "task_name": task,
        "schedule": schedule,
        "nominal_at": nominal,
        "key": key,
        "attempt": 0,
        "state": "missed",
        "finished_at": now,
        "updated_at": now,
    }
