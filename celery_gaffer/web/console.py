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
from ..schedules.explain import Explanation, Transition, explain
from ..schedules.upcoming import calendar_view, first_listed, with_known_dates, with_reasons
from ..store import Database, audit
from ..store import console as queries
from ..store import console_lists as listed
from ..store.audit import AuditEntry
from ..store.beats import beats
from ..store.calendars import load_calendars
from ..store.console_lists import COUNT_CAP, Cursor, ScheduleFilter
from ..store.schedule_rows import StoredSchedule, stored
from .lists import Span
from .present import when, zone_of
from .schedule_page import RunBlock, UpcomingFire, next_clock_change, run_strip, upcoming
from .security import Guard

#: Schedules on one page, runs on the runs page, fires and runs on a detail page.
PAGE_SIZE = 50
RUNS_SHOWN = 100
DETAIL_ROWS = 20
NEXT_FIRES = 10
#: A Beat refreshes its tick at least every 5 s; none for this long means none is running.
BEAT_SILENCE = timedelta(seconds=60)
#: Alerts listed at most (when Beat is down, every schedule may be late).
ALERTS_SHOWN = 50


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
    """One page of schedules, the cursors of the pages after and before it (None: there
    is none), its place in the total, and whether a zone filter's scan window ended it."""

    schedules: list[ScheduleView]
    next_after: str | None
    previous_before: str | None = None
    span: Span = field(default_factory=lambda: Span(0, 0, 0))
    window_ended: bool = False


@dataclass(frozen=True, slots=True)
class Detail:
    """Everything the detail page shows of one schedule."""

    view: ScheduleView
    explanation: Explanation | None
    fires: list[Mapping[Any, Any]] = field(default_factory=list)
    runs: list[dict[str, Any]] = field(default_factory=list)
    strip: list[RunBlock] = field(default_factory=list)
    upcoming: list[UpcomingFire] = field(default_factory=list)
    next_change: Transition | None = None
    history: list[AuditEntry] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class RunPage:
    """One page of runs, newest first, the run ids the pages after and before it start
    from (None: there is none), and its place in the total."""

    runs: list[dict[str, Any]]
    next_after: int | None
    previous_before: int | None
    span: Span


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
        where: ScheduleFilter | None = None,
        state: str | None = None,
        search: str | None = None,
        sort: str = "name",
        after: str | None = None,
        before: str | None = None,
        limit: int = PAGE_SIZE,
    ) -> Page:
        """A page of schedules in ``sort`` order (:data:`~.lists.SORTS`), filtered by
        ``where`` (or ``state`` and ``search``), starting after the cursor ``after`` or
        ending before ``before``; with a state, only those in it now."""
        where = where or ScheduleFilter(state=state, search=search)
        now = self.clock()
        models = self.database.models
        cursor = after or before
        backwards = before is not None and after is None
        start = (
            None
            if cursor is None
            else Cursor.parse(cursor, sort, "before" if backwards else "after")
        )
        with self.database.read() as conn:
            found = listed.schedule_rows(
                conn,
                models,
                now=now,
                limit=limit,
                sort=sort,
                where=where,
                after=start,
                backwards=backwards,
            )
            rows = found.rows
            silence = self._beat_silence(conn, now)
            views = [self._view(conn, row, now, silence) for row in rows]
            latest = queries.latest_runs_of(conn, models, [view.name for view in views])
            span = self._span(conn, now, where, sort, rows, len(views), cursor is not None)
        shown = [
            ScheduleView(view.stored, view.state, view.reason, latest.get(view.name))
            for view in views
            if where.state is None or view.state == where.state
        ]
        first = Cursor.of(rows[0]).encode(sort) if rows else None
        last = Cursor.of(rows[-1]).encode(sort) if rows else None
        if backwards:
            next_after = last or cursor
            previous = found.edge.encode(sort) if found.more and found.edge else None
        else:
            next_after = found.edge.encode(sort) if found.more and found.edge else None
            previous = (first or cursor) if cursor is not None else None
        # Read backwards, a full window is the previous link's business, not a note.
        return Page(shown, next_after, previous, span, found.window_full and not backwards)

    def _span(
        self,
        conn: Connection,
        now: datetime,
        where: ScheduleFilter,
        sort: str,
        rows: list[Mapping[Any, Any]],
        shown: int,
        paged: bool,
    ) -> Span:
        if where.zone is not None:
            return Span(shown, None, None, counted=False)
        models = self.database.models
        total = listed.count_schedules(conn, models, now=now, where=where)
        before = listed.Count(0)
        if paged and rows:
            before = listed.count_schedules(
                conn, models, now=now, where=where, sort=sort, before=Cursor.of(rows[0])
            )
        known = before.exact and before.value <= COUNT_CAP
        return Span(
            shown,
            before.value if known else None,
            None if total.value > COUNT_CAP else total.value,
            at_least=not total.exact,
        )

    def detail(self, name: str) -> Detail | None:
        """The detail of ``name``, or None when there is no such schedule."""
        now = self.clock()
        models = self.database.models
        with self.database.read() as conn:
            row = queries.schedule_row(conn, models, name)
            if row is None:
                return None
            view = self._view(conn, row, now, self._beat_silence(conn, now))
            fires = queries.ledger_fires(conn, models, name, DETAIL_ROWS)
            runs = queries.recent_runs(conn, models, limit=DETAIL_ROWS, schedule=name)
            history = audit.entries(conn, models, schedule=name, limit=DETAIL_ROWS)
            rule = view.stored.policy.bounds.calendar
            if rule is not None and rule.stored_names:
                rule = with_known_dates(rule, load_calendars(conn, models, rule.stored_names))
        schedule = view.stored.schedule
        calendar = calendar_view(schedule, rule)
        explanation = None
        if schedule is not None:
            # From the stored next fire (in the past when Beat is behind), or the fire
            # before it its calendar skipped or moved; a paused schedule lists the fires
            # a resume now would start from.
            start = view.stored.next_fire_at or now + timedelta(seconds=1)
            if view.stored.next_fire_at is not None:
                start = first_listed(
                    calendar, view.stored.watermark_at, start, view.stored.policy.bounds.start_at
                )
            explanation = explain(schedule, start, NEXT_FIRES)
        listed = [] if explanation is None else [fire.utc for fire in explanation.fires]
        reasons = with_reasons(calendar, listed)
        return Detail(
            view,
            explanation,
            fires,
            runs,
            strip=run_strip(runs),
            upcoming=upcoming(explanation, [fire.reason for fire in reasons]),
            next_change=next_clock_change(schedule, now),
            history=history,
        )

    def last_tick(self) -> datetime | None:
        """When any registered Beat last ticked (None: none is registered)."""
        with self.database.read() as conn:
            return _last_tick(conn, self.database.models)

    def beat_down(self, now: datetime | None = None) -> bool:
        """Whether no Beat has ticked within :data:`BEAT_SILENCE` of ``now`` (default:
        the console's clock): none registered, or every one silent that long."""
        last = self.last_tick()
        moment = self.clock() if now is None else now
        return last is None or moment - last > BEAT_SILENCE

    def _beat_silence(self, conn: Connection, now: datetime) -> str | None:
        """The reason a late schedule shows when no Beat is running, else None."""
        last = _last_tick(conn, self.database.models)
        if last is not None and now - last <= BEAT_SILENCE:
            return None
        if last is None:
            return "no Beat is running (none has registered a tick)"
        return f"no Beat is running (last tick {when(last)})"

    def run_page(
        self,
        *,
        state: str | None = None,
        schedule: str | None = None,
        after: int | None = None,
        before: int | None = None,
        limit: int = PAGE_SIZE,
    ) -> RunPage:
        """A page of runs newest first, after the run ``after`` or before ``before``."""
        backwards = before is not None and after is None
        cursor = after if after is not None else before
        models = self.database.models
        with self.database.read() as conn:
            rows, more = listed.run_rows(
                conn,
                models,
                limit=limit,
                state=state,
                schedule=schedule,
                past_id=cursor,
                backwards=backwards,
            )
            total = listed.count_runs(conn, models, state=state, schedule=schedule)
            before_count = 0
            if cursor is not None and rows:
                before_count = listed.count_runs(
                    conn, models, state=state, schedule=schedule, newer_than_id=rows[0]["id"]
                )
        first = rows[0]["id"] if rows else None
        last = rows[-1]["id"] if rows else None
        if backwards:
            next_after, previous = (last or cursor), (first if more else None)
        else:
            next_after = last if more else None
            previous = (first or cursor) if cursor is not None else None
        span = Span(
            len(rows),
            None if before_count > COUNT_CAP else before_count,
            None if total > COUNT_CAP else total,
        )
        return RunPage(rows, next_after, previous, span)

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
        with self.database.read() as conn:
            silence = self._beat_silence(conn, now)
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
                    # About what the page reads: each row fetched costs a ledger lookup.
                    batch=2 * limit + 1,
                )
            ) as alerting,
        ):
            for row, health in alerting:
                if len(found) == limit:
                    return found, True
                schedule = stored(row)
                shown = reason(health, zone_of(schedule.schedule))
                if health.state == Health.LATE and silence is not None:
                    shown = silence
                found.append(ScheduleView(schedule, health.state, shown))
        return found, False

    def _view(
        self, conn: Connection, row: Mapping[Any, Any], now: datetime, silence: str | None
    ) -> ScheduleView:
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
        if health.state == Health.LATE and silence is not None:
            reason = silence
        elif health.state == Health.LATE and health.due_nominal_at is not None:
            due = when(health.due_nominal_at, zone_of(schedule.schedule))
            reason = f"the fire of {due} has not succeeded"
        return ScheduleView(schedule, health.state, " ".join(reason.split()))


def _last_tick(conn: Connection, models: Any) -> datetime | None:
    registered = beats(conn, models)
    return registered[0].last_tick_at if registered else None
