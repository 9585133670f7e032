"""The console's view of one Celery app: what its pages and API read, in bounded queries.

A schedule's state word is the one ``gaffer status`` prints: ``error`` and ``paused``
come from the row; ``ok``/``late``/``failing`` from the health word Beat stores, which
holds until the row's ``check_at``. A row whose word is not ``ok``, or is stale, is
evaluated live with Beat's own rules (:func:`celery_gaffer.beat.health.evaluate_safely`).
"""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import closing
from dataclasses import dataclass, field
from datetime import datetime, timedelta, tzinfo
from typing import Any

from sqlalchemy import Connection

from ..beat.health import evaluate_safely
from ..beat.survey import reason, survey
from ..clock import Clock
from ..protocol import Health
from ..schedule_store import ScheduleStore
from ..schedules.explain import Explanation, explain
from ..store import Database
from ..store import console as queries
from ..store.schedule_rows import StoredSchedule, stored
from .present import when, zone_of
from .security import Guard

#: Schedules on one page, runs on the runs page, fires and runs on a detail page.
PAGE_SIZE = 50
RUNS_SHOWN = 100
DETAIL_ROWS = 20
NEXT_FIRES = 10
#: Alerts listed at most (when Beat is down, every schedule may be late).
ALERTS_SHOWN = 200


@dataclass(frozen=True, slots=True)
class ScheduleView:
    """A schedule with its live state, the reason for it and its latest run."""

    stored: StoredSchedule
    state: str
    reason: str
    last_run: Mapping[Any, Any] | None = None

    @property
    def name(self) -> str:
        return self.stored.name

    @property
    def zone(self) -> tzinfo | None:
        return zone_of(self.stored.schedule)


@dataclass(frozen=True, slots=True)
class Page:
    """One page of schedules and the name the next page starts after (None: the last)."""

    schedules: list[ScheduleView]
    next_after: str | None


@dataclass(frozen=True, slots=True)
class Detail:
    """Everything the detail page shows of one schedule."""

    view: ScheduleView
    explanation: Explanation | None
    fires: list[Mapping[Any, Any]] = field(default_factory=list)
    runs: list[dict[str, Any]] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Console:
    """One app's console: its database, its ScheduleStore, its guard and its clock."""

    app: Any
    database: Database
    store: ScheduleStore
    guard: Guard
    clock: Clock

    def page(
        self,
        *,
        state: str | None = None,
        search: str | None = None,
        after: str | None = None,
        limit: int = PAGE_SIZE,
    ) -> Page:
        """A page of schedules by name; with ``state``, only those in it now."""
        now = self.clock()
        models = self.database.models
        with self.database.read() as conn:
            rows = queries.schedule_page(
                conn, models, limit=limit, after=after, state=state, search=search, now=now
            )
            views = [self._view(conn, row, now) for row in rows]
            latest = queries.latest_runs_of(conn, models, [view.name for view in views])
        shown = [
            ScheduleView(view.stored, view.state, view.reason, latest.get(view.name))
            for view in views
            if state is None or view.state == state
        ]
        next_after = rows[-1]["name"] if len(rows) == limit else None
        return Page(shown, next_after)

    def detail(self, name: str) -> Detail | None:
        """The detail of ``name``, or None when there is no such schedule."""
        now = self.clock()
        models = self.database.models
        with self.database.read() as conn:
            row = queries.schedule_row(conn, models, name)
            if row is None:
                return None
            view = self._view(conn, row, now)
            fires = queries.ledger_fires(conn, models, name, DETAIL_ROWS)
            runs = queries.recent_runs(conn, models, limit=DETAIL_ROWS, schedule=name)
        schedule = view.stored.schedule
        explanation = None
        if schedule is not None:
            # From the stored next fire (in the past when Beat is behind); a paused
            # schedule lists the fires a resume now would start from.
            start = view.stored.next_fire_at or now + timedelta(seconds=1)
            explanation = explain(schedule, start, NEXT_FIRES)
        return Detail(view, explanation, fires, runs)

    def runs(
        self, *, state: str | None = None, schedule: str | None = None
    ) -> list[dict[str, Any]]:
        """The latest runs (newest first), each with its schedule's stored definition."""
        with self.database.read() as conn:
            return queries.recent_runs(
                conn, self.database.models, limit=RUNS_SHOWN, state=state, schedule=schedule
            )

    def alerts(self, limit: int = ALERTS_SHOWN) -> tuple[list[ScheduleView], bool]:
        """The first ``limit`` schedules that are late, failing or in error, by name, with
        their reasons, and whether more follow."""
        now = self.clock()
        found: list[ScheduleView] = []
        # The survey ``gaffer status`` prints: one statement, streamed, stopped early.
        with (
            self.database.read() as conn,
            closing(
                survey(
                    conn,
                    self.database.models,
                    now,
                    self.database.settings,
                    alerts_only=True,
                    every_column=True,
                )
            ) as alerting,
        ):
            for row, health in alerting:
                if len(found) == limit:
                    return found, True
                schedule = stored(row)
                shown = reason(health, zone_of(schedule.schedule))
                found.append(ScheduleView(schedule, health.state, shown))
        return found, False

    def _view(self, conn: Connection, row: Mapping[Any, Any], now: datetime) -> ScheduleView:
        schedule = stored(row)
        if schedule.error:
            return ScheduleView(schedule, Health.ERROR, " ".join(schedule.error.split()))
        if not schedule.enabled:
            return ScheduleView(schedule, Health.PAUSED, "")
        check_at = row["check_at"]
        if row["health"] == Health.OK and (check_at is None or check_at > now):
            done = "done: its bounds leave it nothing to fire" if schedule.finished else ""
            return ScheduleView(schedule, Health.OK, done)
        health, _ = evaluate_safely(conn, self.database.models, row, now, self.database.settings)
        reason = health.reason
        if health.state == Health.LATE and health.due_nominal_at is not None:
            due = when(health.due_nominal_at, zone_of(schedule.schedule))
            reason = f"the fire of {due} has not succeeded"
        return ScheduleView(schedule, health.state, " ".join(reason.split()))
