"""What a tick sends: claimed, decided and recorded in the ledger, returned as data.

Each method of :class:`Dispatcher` claims one batch in one transaction and returns a
:class:`Dispatched`: the fires to send now, the jittered fires to hold until their send
time (:mod:`.held`), their payloads. It never talks to the broker; the caller publishes
(:mod:`.publisher`) and hands the held fires over.

:meth:`Dispatcher.due` decides the fires of the schedules whose ``next_fire_at`` has
passed (:mod:`.catchup`, pure; the rows in :mod:`.plan`), inserts them and advances the
watermarks. Its schedules' ``UPDATE`` and the ``COMMIT`` are sent without waiting
(:func:`~celery_gaffer.store.pipelined.committing`), so the result comes while the
server commits: nothing it names may reach the broker, or be held, before its
:attr:`Dispatched.committed` has returned, and nothing at all if that raised.

Several Beats may run at once: the ledger's unique ``(schedule, nominal_at)`` and row
locks make each fire sent once.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Connection

from ..schedules.spec import ScheduleSpec
from ..store import Database
from ..store import fires as ledger
from ..store import runs as run_rows
from ..store import schedules as schedule_rows
from ..store.calendars import loader as calendar_loader
from ..store.fires import Fire
from ..store.pipelined import committing
from ..store.schedules import DueSchedule, Payload
from .catchup import decide, on_time_for
from .held import HOLD_AHEAD
from .plan import RowPlan, log_decision, plan_row, recount, with_stored_calendars
from .redelivery import claim_unconfirmed
from .rows import ErrorMove, RowChecks, record_moves

logger = logging.getLogger("celery_gaffer.scheduler")

# Most times one fire is published when delivery confirmation finds it never started.
MAX_PUBLISHES = 4


@dataclass(frozen=True, slots=True)
class Hold:
    """A claimed fire to send at ``send_at`` (its claim runs until ``claimed_until``)."""

    fire: Fire
    payload: Payload
    send_at: datetime
    claimed_until: datetime


@dataclass(frozen=True, slots=True)
class Dispatched:
    """One batch claimed: what to send now, what to hold, and whether to come back."""

    #: Fires to publish now, each with its schedule's payload in :attr:`payloads`.
    send: list[Fire] = field(default_factory=list)
    payloads: dict[str, Payload] = field(default_factory=dict)
    #: Fires to publish at their own send time.
    holds: list[Hold] = field(default_factory=list)
    #: Rows claimed (schedules or fires); 0: nothing was due.
    claimed: int = 0
    #: A full batch: more may be due at once.
    full: bool = False
    #: Waits for the commit that recorded these fires, and raises if it failed; None:
    #: committed already.
    committed: Callable[[], None] | None = None


_NOTHING = Dispatched()


@dataclass
class Dispatcher:
    """Claims, decides and records one Beat's fires, a batch at a time."""

    app: Any
    database: Database
    #: Schedules (and pending fires) handled per transaction.
    batch_size: int
    #: Due rows validated (cached), and the errors of those that cannot be used.
    rows: RowChecks

    @contextmanager
    def due(self, now: datetime, max_interval: float, lead: timedelta) -> Iterator[Dispatched]:
        """The fires of the schedules due by ``now + lead``, recorded; the block runs
        while the commit is under way (see the module docstring). Fires due later than
        ``now`` are held, as are jittered fires sent within :data:`.HOLD_AHEAD` after.
        Leaving the block waits for the commit (a failure is raised); leaving it by an
        error leaves the commit's outcome unread."""
        settings = self.database.settings
        on_time = on_time_for(max_interval)
        republish_at = now + timedelta(seconds=settings.republish_after)
        horizon = now + lead
        hold_until = horizon + HOLD_AHEAD
        with self.database.begin() as conn:
            due = schedule_rows.claim_due_schedules(
                conn, self.database.models, horizon, self.batch_size
            )
            if not due:
                yield _NOTHING
                return
            plans: list[RowPlan] = []
            changes: list[dict[str, Any]] = []
            bounded: dict[str, tuple[DueSchedule, ScheduleSpec, dict[str, Any]]] = {}
            payloads: dict[str, Payload] = {}
            moves: list[ErrorMove] = []
            # Loaded once a batch, by the first schedule that names a stored one.
            calendars = calendar_loader(conn, self.database.models)

            for row in due:
                # Whatever one row holds, only that schedule goes to error: the others
                # of the batch, and Beat, go on.
                try:
                    spec, payload = self.rows.usable(row, self.app.tasks)
                    spec = with_stored_calendars(spec, calendars)
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
                        horizon=horizon,
                    )
                    plan = plan_row(row, window, decision, now, republish_at, hold_until)
                except Exception as exc:  # noqa: BLE001 - isolated to its schedule
                    change = self.rows.error_change(row, exc, now)
                    changes.append(change)
                    if change["error"] != row.error:
                        moves.append(ErrorMove(row.name, row.error, change["error"]))
                    continue
                self.rows.note_recovery(row)
                if row.error is not None:
                    moves.append(ErrorMove(row.name, row.error, None))
                log_decision(row, decision)
                plans.append(plan)
                changes.append(plan.change)
                if spec.policy.bounds.max_runs is not None:
                    bounded[row.name] = (row, spec, plan.change)
                payloads[row.name] = payload
            record_moves(conn, self.database.models, moves, now)
            inserted = self._record(conn, due, plans, changes, bounded, payloads, now)
            later: list[tuple[Any, dict[str, Any]]] = []
            schedule_rows.advance_schedules(conn, self.database.models, changes, later=later)
            # The schedules' UPDATE and the COMMIT run on the server while the caller
            # builds its first messages.
            with committing(conn, later) as committed:
                holds = {key: hold for plan in plans for key, hold in plan.holds.items()}
                yield Dispatched(
                    send=[f for f in inserted if f.key not in holds and f.publish_count > 0],
                    payloads=payloads,
                    holds=[
                        Hold(fire, payloads[fire.schedule], *holds[fire.key])
                        for fire in inserted
                        if fire.key in holds
                    ],
                    claimed=len(due),
                    full=len(due) >= self.batch_size,
                    committed=committed,
                )

    def _record(
        self,
        conn: Connection,
        due: list[DueSchedule],
        plans: list[RowPlan],
        changes: list[dict[str, Any]],
        bounded: dict[str, tuple[DueSchedule, ScheduleSpec, dict[str, Any]]],
        payloads: dict[str, Payload],
        now: datetime,
    ) -> list[Fire]:
        """Insert the planned fires and ``missed`` runs, complete the changes with what
        was inserted, ask for the health checks of schedules into or out of error; the
        fires inserted."""
        models = self.database.models
        inserted = ledger.insert_fires(conn, models, [f for plan in plans for f in plan.fires], now)
        # What max_runs counts: the fires this tick really added (a fire already in the
        # ledger, from a backfill of the same time say, is not sent again).
        sent = Counter(fire.schedule for fire in inserted)
        for plan in plans:
            if plan.fires:
                plan.change["sent"] = sent.get(plan.fires[0].schedule, 0)
        for row, spec, change in bounded.values():
            recount(row, spec, change)
        recovered = [row.name for row in due if row.error is not None and row.name in payloads]
        # A schedule newly in error, or out of it, is checked: its health changed.
        errored = [c["id"] for c in changes if c["error"] is not None]
        newly = [row.name for row in due if row.error is None and row.id in errored]
        schedule_rows.request_checks(conn, models, recovered + newly)
        run_rows.insert_runs(conn, models, [r for plan in plans for r in plan.missed_runs])
        return inserted

    def pending(self, now: datetime) -> Dispatched:
        """Claim the pending fires due within the hold window (committed): those due now
        to send, the others to hold (:mod:`.held`)."""
        settings = self.database.settings
        until = now + HOLD_AHEAD + timedelta(seconds=settings.republish_after)
        models = self.database.models
        with self.database.begin() as conn:
            claimed = ledger.claim_pending(
                conn, models, now, until, self.batch_size, ahead=HOLD_AHEAD
            )
            if not claimed:
                return _NOTHING
            payloads = schedule_rows.load_payloads(conn, models, {f.schedule for f in claimed})
            orphans = [fire.id for fire in claimed if fire.schedule not in payloads]
            ledger.mark_cancelled(conn, models, orphans)
        # A schedule in error keeps its pending fires (claimed again after
        # republish_after) until the error clears.
        send: list[Fire] = []
        holds: list[Hold] = []
        for fire in claimed:
            if not _sendable(fire, payloads):
                continue
            if fire.send_at is not None and fire.send_at > now:
                holds.append(Hold(fire, payloads[fire.schedule], fire.send_at, until))
            else:
                send.append(fire)
        full = len(claimed) >= self.batch_size
        return Dispatched(send, payloads, holds, len(claimed), full)

    def unconfirmed(self, now: datetime) -> Dispatched:
        """Claim the sent fires no worker ever started, to publish again (committed;
        delivery confirmation is opt-in: nothing without it)."""
        settings = self.database.settings
        if settings.confirm_delivery_after is None:
            return _NOTHING
        models = self.database.models
        with self.database.begin() as conn:
            found = claim_unconfirmed(
                conn, models, now, settings.confirm_delivery_after, MAX_PUBLISHES, self.batch_size
            )
            again = found.again
            payloads = schedule_rows.load_payloads(conn, models, {f.schedule for f in again})
        for key in found.given_up:
            logger.error(
                "fire %s was published %d times and never started; giving up",
                key,
                MAX_PUBLISHES,
                extra={"action": "fire_unconfirmed", "key": key},
            )
        send = [fire for fire in again if _sendable(fire, payloads)]
        return Dispatched(send, payloads, [], found.handled, found.handled >= self.batch_size)


def _sendable(fire: Fire, payloads: dict[str, Payload]) -> bool:
    payload = payloads.get(fire.schedule)
    return payload is not None and payload.error is None
