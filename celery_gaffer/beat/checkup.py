"""The tick's health work: runs whose heartbeat stopped, schedules' health, alerts.

A run whose worker died leaves a ``running`` row whose heartbeat stops: the sweep marks
it ``lost`` (counted against its schedule, like a failure) every third of the lease TTL.
The schedules whose ``check_at`` has passed are then re-checked (:mod:`.health`) for at
most :data:`HEALTH_BUDGET`, each change announced, and the webhook alerts of the changes
woken (:mod:`.alerts`).
"""

from __future__ import annotations

import logging
import time
from datetime import datetime

from sqlalchemy import Connection

from ..protocol import RunState
from ..store import Database
from ..store import fires as ledger
from ..store import runs as run_rows
from ..store import schedules as schedule_rows
from ..store.models import Models
from .alerts import AlertDelivery
from .health import announce, check_due_within
from .metrics import Metrics

logger = logging.getLogger("celery_gaffer.scheduler")

#: Seconds after which a tick starts no other batch of health checks.
HEALTH_BUDGET = 0.25


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


class Checkup:
    """The lost-run sweep and the health checks of one Beat's tick."""

    def __init__(self, database: Database, alerts: AlertDelivery, batch_size: int) -> None:
        self.database = database
        self.alerts = alerts
        self.batch_size = batch_size
        self.metrics: Metrics | None = None
        #: When the next sweep is due, by time.monotonic().
        self.sweep_at = 0.0

    def due(self, now: datetime, checks: bool) -> bool:
        """Whether :meth:`run` has work: ``checks`` (health checks due by the probe),
        alerts to send from the tick, or a sweep."""
        return checks or self.alerts.due(now) or time.monotonic() >= self.sweep_at

    def run(self, now: datetime) -> None:
        """Mark runs whose heartbeat stopped ``lost`` (when a sweep is due), re-check due
        schedules' health (until :data:`HEALTH_BUDGET` has passed: the rest on the next
        tick), announce the changes and wake the alerts."""
        settings = self.database.settings
        models = self.database.models
        sweep = time.monotonic() >= self.sweep_at
        if sweep:
            # Heartbeats beat every third of the TTL; looking as often finds a lost run
            # within a TTL and a third, without a query on every tick.
            self.sweep_at = time.monotonic() + settings.lease_ttl / 3
        lost: list[tuple[str, str | None]] = []
        metrics = self.metrics
        if sweep or metrics is not None:
            with self.database.begin() as conn:
                lost = sweep_lost(conn, models, settings.lease_ttl) if sweep else []
                if metrics is not None:
                    metrics.observe_runs(conn, models, now)
        changes = check_due_within(self.database, now, HEALTH_BUDGET, self.batch_size)
        for run_id, schedule in lost:
            logger.error(
                "run %s of %s is lost: its heartbeat stopped (worker killed?)",
                run_id,
                schedule or "-",
                extra={"action": "run_lost", "schedule": schedule},
            )
        for health, previous in changes:
            announce(health, previous)
            if metrics is not None:
                metrics.observe_health(health)
        # After the changes' commit, so that their alerts are there to send.
        self.alerts.health_checked(any(str(h.state) != p for h, p in changes))
