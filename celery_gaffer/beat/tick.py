"""One Beat tick: due fires into the ledger and out to the broker, then health.

The data path of a tick, in order:

1. :meth:`Tick.dispatch_due`: claim the schedules whose ``next_fire_at`` has passed
   (an index), decide their fires from the persisted watermark (:mod:`.catchup`, pure;
   the rows in :mod:`.plan`), insert them into the ledger and advance the watermarks in
   one transaction, then publish after commit (:mod:`.publisher`); a jittered fire to
   be sent within a second is inserted claimed and held instead (:mod:`.held`);
2. :meth:`Tick.publish_pending`: claim the pending fires whose time has come or, for
   jittered fires never claimed, comes within a second; publish the first, hold the
   others; it also publishes the fires whose publisher died between commit and publish;
3. :meth:`Tick.confirm_deliveries`: publish again the sent fires no worker ever started
   (opt-in, :mod:`.redelivery`);
4. :meth:`Tick.check_health`: mark runs whose heartbeat stopped ``lost`` and re-check the
   health of the schedules whose ``check_at`` has passed (:mod:`.health`) for at most
   :data:`HEALTH_BUDGET`, then wake the thread that POSTs the webhook alerts of health
   changes (:mod:`.alerts`); partitions are made ahead by a thread too (:mod:`.side`).

Between these, :meth:`Tick.send_held` publishes each held fire when its send time comes;
a run woken only for that makes no probe and no claim (the sent fires are marked
together, in one transaction per 0.2 s at most).

Several Beats may run at once: the ledger's unique ``(schedule, nominal_at)`` and row
locks make each fire sent once.
"""

from __future__ import annotations

import logging
import time
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from ..clock import Clock
from ..exceptions import one_line
from ..schedules.spec import ScheduleSpec
from ..store import Database
from ..store import fires as ledger
from ..store import runs as run_rows
from ..store import schedules as schedule_rows
from ..store.fires import Fire
from ..store.later import committing
from ..store.models import Models
from ..store.schedules import DueSchedule, Payload, Probe
from .alerts import AlertDelivery
from .catchup import decide
from .health import announce, check_due_within, sweep_lost
from .held import CLAIM_AHEAD, HOLD_AHEAD, HeldSends, Sender
from .metrics import Metrics
from .partition_keeper import PartitionKeeper
from .plan import RowPlan, log_decision, plan_row, recount
from .publisher import Published, mark, mark_groups, send
from .redelivery import claim_unconfirmed
from .rows import RowChecks

logger = logging.getLogger("celery_gaffer.scheduler")

# Most times one fire is published when delivery confirmation finds it never started.
MAX_PUBLISHES = 4
#: Longest a Beat with a sender thread decides fires before they are due (it decides
#: twice as far ahead as its last batch took, decaying, up to this).
DECIDE_AHEAD = 0.5
#: Seconds after which a tick starts no other batch of health checks.
HEALTH_BUDGET = 0.25


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
    #: Due rows validated (cached), and the errors of those that cannot be used.
    rows: RowChecks = field(default_factory=RowChecks)
    _next_lost_sweep: float = 0.0
    #: Jittered fires this Beat claimed, sent at their own time (:mod:`.held`).
    held: HeldSends = field(default_factory=HeldSends)
    #: When the database work is next due, by the clock and by time.monotonic(), set
    #: when the last run returned early for a held send (None: the next run does
    #: everything due). Either time passing ends the wait: a clock stepped back cannot
    #: hold the database work up.
    _db_at: tuple[datetime, float] | None = None
    #: Sends the held fires from a thread of its own (:meth:`start_sender`).
    _sender: Sender | None = None
    #: Payloads the broker refused to the sender thread, for the tick to record.
    _refusals: deque[dict[str, str]] = field(default_factory=deque)
    #: How many seconds before they are due this Beat decides fires (with a sender).
    _lead: float = 0.0
    #: A run is under way (a close() now comes from a signal handler inside it).
    _in_run: bool = False
    #: Makes the time partitions ahead (PostgreSQL).
    partitions: PartitionKeeper = field(init=False)
    #: POSTs the webhook alerts (from a thread of its own once :meth:`start_sender` ran).
    alerts: AlertDelivery = field(init=False)

    def __post_init__(self) -> None:
        self.partitions = PartitionKeeper(self.database)
        self.alerts = AlertDelivery(self.database, self.clock)

    @property
    def models(self) -> Models:
        return self.database.models

    def run(self, max_interval: float) -> float:
        """:meth:`_run`, marked as under way for :meth:`close`."""
        self._in_run = True
        try:
            return self._run(max_interval)
        finally:
            self._in_run = False

    def _run(self, max_interval: float) -> float:
        """Do every kind of work that is due; the seconds until the next is due.

        A run woken early for a held send (:mod:`.held`) sends it and goes back to sleep
        without touching the database, until the database work is due. With a sender
        thread (:meth:`start_sender`) the run does none of that, and decides fires up to
        :data:`DECIDE_AHEAD` before they are due (held, then sent at their time).
        """
        self._send_held_here()
        if self._db_at is not None:
            at, deadline = self._db_at
            left = min((at - self.clock()).total_seconds(), deadline - time.monotonic())
            if left > 0:
                return self._wait(min(left, max_interval))
            self._db_at = None
        settings = self.database.settings
        now = self.clock()
        self.partitions.on_tick(now)
        current = self.probe()
        lead = timedelta(seconds=self._lead)
        fires, checks, pending, confirms = current.due(now, lead)
        busy = worked = False
        if fires or pending or confirms:
            worked = True
            started = time.monotonic()
            while True:
                busy = self.dispatch_due(now, max_interval)
                busy = self.publish_pending(now) or busy
                busy = self.confirm_deliveries(now) or busy
                self._send_held_here()
                if not busy or time.monotonic() - started > self.tick_budget:
                    break
                now = self.clock()
        alerts_due = self.alerts.due(self.clock())
        if checks or alerts_due or time.monotonic() >= self._next_lost_sweep:
            worked = True
            self.check_health(self.clock())
            self._send_held_here()
        if busy:
            return 0.0
        if worked:
            current = self.probe()
        wake_at = current.earliest(timedelta(seconds=self._lead))
        delay = float(max_interval)
        if wake_at is not None:
            delay = min(delay, (wake_at - self.clock()).total_seconds())
        alerts_in = self.alerts.wait_in(self.clock())
        if alerts_in is not None:
            delay = min(delay, alerts_in)
        delay = max(
            0.0, min(delay, self._next_lost_sweep - time.monotonic(), settings.lease_ttl / 3)
        )
        wait = self._wait(delay)
        if wait < delay:
            self._db_at = (
                self.clock() + timedelta(seconds=delay),
                time.monotonic() + delay,
            )
        return wait

    def _wait(self, delay: float) -> float:
        """``delay``, or less when a held send or a marking is due sooner. With a sender
        thread, only markings: due :data:`.MARK_EVERY` after a send at the latest."""
        now = self.clock()
        held_in = self.held.wait_in(now) if self._sender is None else self.held.marking_in(now)
        if held_in is not None:
            delay = min(delay, held_in)
        return max(0.0, delay)

    def _send_held_here(self) -> None:
        """Send the held fires due (no sender thread), or mark those the thread sent and
        record the payloads the broker refused it."""
        if self._sender is not None and not self._sender.alive:
            logger.error(
                "the thread sending held fires has stopped; Beat sends them itself",
                extra={"action": "held_sender_stopped"},
            )
            self._sender, self._lead = None, 0.0
        if self._sender is None:
            self.send_held()
            return
        self._record_refusals()
        self.mark_held(self.clock())

    def start_sender(self) -> None:
        """Send held fires from a thread of their own from now on (:class:`.Sender`), with
        a producer of its own from the app's pool, and do the side work (alerts,
        partitions) from threads of its own; :meth:`close` stops them."""
        self.alerts.start()
        self.partitions.start(self.clock)
        if self._sender is None:
            self._sender = Sender(
                self.held,
                self.clock,
                self._send_held_in_thread,
                lambda: self.app.producer_pool.acquire(block=True),
            )
            self._sender.start()

    def _send_held_in_thread(self, producer: Callable[[], Any]) -> None:
        # Marking, and recording a refused payload, are left to the tick: a commit waits
        # for the disk (sometimes 0.1 s), and the thread never waits for the database.
        self.send_held(producer, in_thread=True)

    def send_held(
        self, producer: Callable[[], Any] | None = None, *, in_thread: bool = False
    ) -> None:
        """Publish the held fires whose send time has come (through ``producer()``, by
        default the Beat's); mark the sent ones in time (not ``in_thread``: the sender
        thread leaves marking, and recording refused payloads, to the tick)."""
        now = self.clock()
        due = self.held.due(now)
        while due:
            # One payload per schedule per send (two held fires of one schedule may
            # carry different payloads: an edit between their claims).
            payloads: dict[str, Payload] = {}
            fires: list[Fire] = []
            later: list[tuple[Fire, Payload]] = []
            for fire, payload in due:
                if payloads.setdefault(fire.schedule, payload) == payload:
                    fires.append(fire)
                else:
                    later.append((fire, payload))
            refused = self._publish(
                fires, payloads, held=True, producer=producer, in_thread=in_thread
            )
            due = [(fire, payload) for fire, payload in later if fire.schedule not in refused]
        if not in_thread:
            self.mark_held(now)

    def mark_held(self, now: datetime) -> None:
        """Mark the sent held fires ``sent`` when it is time (:meth:`.HeldSends.to_mark`)."""
        marking = self.held.to_mark(now)
        if marking:
            try:
                mark_groups(self.database, marking)
            except Exception:
                for at, fires in marking:
                    self.held.sent(fires, at)  # marked on a later run
                raise

    def close(self) -> None:
        """Stop the sender thread, mark what was sent, and give back the held fires not
        sent (one line if the database cannot be reached: any Beat publishes them once
        their claim runs out). The side threads are stopped without waiting."""
        self.alerts.stop()
        self.partitions.stop()
        if self._sender is not None:
            if not self._sender.stop():
                logger.warning(
                    "the thread sending held fires is still publishing at shutdown; a "
                    "fire it sends now stays claimed, and any Beat sends it again once "
                    "its claim runs out (same task id and key: harmless)",
                    extra={"action": "held_sender_busy_at_shutdown"},
                )
            self._sender, self._lead = None, 0.0
        if self._in_run:
            # Celery's Beat closes its scheduler from its SIGTERM handler, here inside
            # a run that may hold a write transaction (on SQLite, a lock this thread
            # would wait 30 s for). Its Service closes it again once the run unwound.
            return
        try:
            self._record_refusals()
            marking = self.held.to_mark(self.clock(), force=True)
            if marking:
                mark_groups(self.database, marking)
            claims = self.held.release()
            if claims:
                with self.database.begin() as conn:
                    ledger.unclaim(conn, self.models, claims)
        except Exception as exc:  # noqa: BLE001 - stopping anyway; the ledger stays correct
            logger.warning(
                "could not give back held fires, or mark sent ones, at shutdown (%s); "
                "any Beat publishes them once their claim runs out (a repeat of a sent "
                "one is harmless: same task id and key)",
                one_line(exc),
                extra={"action": "held_fires_not_released"},
            )

    def probe(self) -> Probe:
        confirm = self.database.settings.confirm_delivery_after is not None
        with self.database.autocommit() as conn:
            return schedule_rows.probe(conn, self.models, confirm=confirm, claim_ahead=CLAIM_AHEAD)

    def dispatch_due(self, now: datetime, max_interval: float) -> bool:
        """Decide, record and publish the fires of the schedules due now; True: a full
        batch (call again)."""
        settings = self.database.settings
        on_time = timedelta(seconds=max(2 * float(max_interval), 10.0))
        republish_at = now + timedelta(seconds=settings.republish_after)
        # Fires due by the horizon are decided now; those not due yet are held.
        horizon = now + timedelta(seconds=self._lead)
        hold_until = horizon + HOLD_AHEAD
        started = time.monotonic()
        with self.database.begin() as conn:
            due = schedule_rows.claim_due_schedules(conn, self.models, horizon, self.batch_size)
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
                    spec, payload = self.rows.usable(row, self.app.tasks)
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
                    changes.append(self.rows.error_change(row, exc, now))
                    continue
                self.rows.note_recovery(row)
                log_decision(row, decision)
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
                recount(row, spec, change)
            recovered = [row.name for row in due if row.error is not None and row.name in payloads]
            # A schedule newly in error, or out of it, is checked: its health changed.
            errored = [c["id"] for c in changes if c["error"] is not None]
            newly = [row.name for row in due if row.error is None and row.id in errored]
            schedule_rows.request_checks(conn, self.models, recovered + newly)
            run_rows.insert_runs(conn, self.models, [r for plan in plans for r in plan.missed_runs])
            # The schedules' UPDATE and the COMMIT run on the server while the first
            # publish batch is built; nothing reaches the broker before the commit.
            later: list[tuple[Any, dict[str, Any]]] = []
            schedule_rows.advance_schedules(conn, self.models, changes, later=later)
            with committing(conn, later) as committed:
                holds = {key: hold for plan in plans for key, hold in plan.holds.items()}
                now_sent = [f for f in inserted if f.key not in holds and f.publish_count > 0]

                def recorded() -> None:
                    committed()
                    if self._sender is not None:
                        # Twice what this batch took, decaying: the next batch is
                        # decided (and its fires held) before they are due.
                        took = 2 * (time.monotonic() - started)
                        self._lead = min(DECIDE_AHEAD, max(took, 0.9 * self._lead))
                    for fire in inserted:  # held once recorded: the sender may send them
                        hold = holds.pop(fire.key, None)
                        if hold is not None:
                            self.held.hold(fire, payloads[fire.schedule], *hold)

                published = self._send(now_sent, payloads, recorded)
        self._sent(published)
        return len(due) >= self.batch_size

    def publish_pending(self, now: datetime) -> bool:
        """Claim the pending fires due within the hold window; publish those due now and
        hold the others (:mod:`.held`). True: a full batch."""
        settings = self.database.settings
        until = now + HOLD_AHEAD + timedelta(seconds=settings.republish_after)
        with self.database.begin() as conn:
            claimed = ledger.claim_pending(
                conn, self.models, now, until, self.batch_size, ahead=HOLD_AHEAD
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
        now_sent: list[Fire] = []
        for fire in claimed:
            if not _sendable(fire, payloads):
                continue
            if fire.send_at is not None and fire.send_at > now:
                self.held.hold(fire, payloads[fire.schedule], fire.send_at, until)
            else:
                now_sent.append(fire)
        self._publish(now_sent, payloads)
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
        """Mark runs whose heartbeat stopped ``lost``, re-check due schedules' health
        (until :data:`HEALTH_BUDGET` has passed: the rest on the next tick)."""
        settings = self.database.settings
        sweep = time.monotonic() >= self._next_lost_sweep
        if sweep:
            # Heartbeats beat every third of the TTL; looking as often finds a lost run
            # within a TTL and a third, without a query on every tick.
            self._next_lost_sweep = time.monotonic() + settings.lease_ttl / 3
        lost: list[tuple[str, str | None]] = []
        if sweep or self.metrics is not None:
            with self.database.begin() as conn:
                lost = sweep_lost(conn, self.models, settings.lease_ttl) if sweep else []
                if self.metrics is not None:
                    self.metrics.observe_runs(conn, self.models, now)
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
            if self.metrics is not None:
                self.metrics.observe_health(health)
        # After the changes' commit, so that their alerts are there to send.
        self.alerts.health_checked(any(str(h.state) != p for h, p in changes))

    def _publish(
        self,
        fires: list[Fire],
        payloads: dict[str, Payload],
        *,
        held: bool = False,
        producer: Callable[[], Any] | None = None,
        in_thread: bool = False,
    ) -> set[str]:
        """Send ``fires`` through ``producer()`` (the Beat's by default) and mark the sent
        ones ``sent`` (``held``: later, together); the schedules whose payload the broker
        refused."""
        if not fires:
            return set()
        published = send(self.app, fires, payloads, (producer or self.producer)())
        return self._sent(published, held=held, in_thread=in_thread)

    def _send(
        self, fires: list[Fire], payloads: dict[str, Payload], committed: Callable[[], None]
    ) -> Published:
        """Send ``fires`` through the Beat's producer once ``committed()`` has returned
        (:func:`.publisher.send`), not marking them."""
        if not fires:
            committed()
            return Published()
        try:
            producer = self.producer()
        except BaseException:
            committed()  # recorded all the same: the fires are published again later
            raise
        return send(self.app, fires, payloads, producer, committed)

    def _sent(
        self, published: Published, *, held: bool = False, in_thread: bool = False
    ) -> set[str]:
        """After :func:`.publisher.send`: mark the sent fires ``sent`` (``held``: later,
        together), put the schedules whose payload was refused in error; those."""
        if held:
            self.held.sent(published.sent, self.clock())
        else:
            mark(self.database, published.sent, self.clock)
        if published.refused:
            # Their held fires wait in the ledger with the rest (claimed again when
            # their claims run out), rather than being refused one by one.
            self.held.drop(published.refused)
            if in_thread:
                self._refusals.append(published.refused)
            else:
                self._record_refused(published.refused)
        metrics = self.metrics  # the sender thread's view: close() may clear it
        if metrics is not None:
            now = self.clock()
            for fire in published.sent:
                metrics.fire_lag.observe(max(0.0, (now - fire.nominal_at).total_seconds()))
        return set(published.refused)

    def _record_refusals(self) -> None:
        """Record the refusals the sender thread queued (each taken once recorded)."""
        while self._refusals:
            self._record_refused(self._refusals[0])
            self._refusals.popleft()

    def _record_refused(self, refused: dict[str, str]) -> None:
        """Put the schedules whose payload the broker refused in error."""
        for name, reason in refused.items():
            self.rows.report_error(name, reason)
        with self.database.begin() as conn:
            # Not loaded again by itself: the row validates, so each recheck would
            # add a fire the broker refuses again. Fixing its options (update,
            # --replace) or resuming it clears the error; its pending fires wait.
            schedule_rows.mark_errors(conn, self.models, refused, None)


def _sendable(fire: Fire, payloads: dict[str, Payload]) -> bool:
    payload = payloads.get(fire.schedule)
    return payload is not None and payload.error is None
