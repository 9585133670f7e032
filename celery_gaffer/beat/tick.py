"""One Beat tick: due fires into the ledger and out to the broker, then health.

Data flows one way: database -> what to send -> broker -> marked. Each run of
:meth:`Tick.run`, in order:

1. :meth:`Tick.dispatch_due`: the fires of the schedules due are decided and recorded
   (:mod:`.dispatch`); those due now are published while the commit is under way, none
   before it is known (:mod:`.publisher`); once it is, the jittered ones due within a
   second are handed to the held sender (:mod:`.held_sender`), which sends each at its
   time; the sent are then marked (:mod:`.marking`);
2. :meth:`Tick.publish_pending`: the pending fires whose time has come (or, for jittered
   fires never claimed, comes within a second) are claimed, the first published, the
   others held; among them, the fires whose publisher died between commit and publish;
3. :meth:`Tick.confirm_deliveries`: the sent fires no worker ever started are published
   again (opt-in);
4. :meth:`Tick.check_health`: the lost-run sweep and health checks (:mod:`.checkup`);
   partitions and webhook alerts are made and sent by threads of their own, as are
   this Beat's row in the Beats' registry (:mod:`.registry`), which each run notes it
   ticked, and the resumes of schedules whose pause ended (:mod:`.resumes`).

When the run next wakes, and how far ahead fires are decided, is :mod:`.wake`'s (pure).
A run woken only for a held send makes no probe and no claim.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime
from typing import Any

from ..clock import Clock
from ..store import Database
from ..store import schedules as schedule_rows
from ..store.fires import Fire
from ..store.models import Models
from ..store.schedules import Payload, Probe
from .alerts import AlertDelivery
from .checkup import Checkup
from .dispatch import MAX_PUBLISHES, Dispatched, Dispatcher
from .held import CLAIM_AHEAD, HeldSends
from .held_sender import HeldSender
from .marking import mark
from .metrics import Metrics
from .partition_keeper import PartitionKeeper
from .publisher import Published, send
from .registry import Registry
from .resumes import ResumeDue, Resumes
from .rows import RowChecks
from .wake import WakePlanner, nap, until_database_work

__all__ = ["MAX_PUBLISHES", "Tick"]


class Tick:
    """The tick of one Beat: the work of ``Scheduler.tick``, without Celery's interface."""

    def __init__(
        self,
        app: Any,
        database: Database,
        clock: Clock,
        producer: Callable[[], Any],
        *,
        resume_due: ResumeDue,
        batch_size: int = 1000,
        tick_budget: float = 1.0,
    ) -> None:
        self.app, self.database, self.clock = app, database, clock
        #: The Beat's producer (Celery makes it on first use).
        self.producer = producer
        #: Longest a run keeps dispatching before it lets Beat's loop run (it returns 0).
        self.tick_budget = tick_budget
        #: Due rows validated (cached), and the errors of those that cannot be used.
        self.rows = RowChecks()
        self.dispatcher = Dispatcher(app, database, batch_size, self.rows)
        self.held_sender = HeldSender(app, database, clock, producer, self.rows)
        self.wake = WakePlanner()
        #: Makes the time partitions ahead (PostgreSQL).
        self.partitions = PartitionKeeper(database)
        #: POSTs the webhook alerts (from a thread of its own once :meth:`start_sender` ran).
        self.alerts = AlertDelivery(database, clock)
        self.checkup = Checkup(database, self.alerts, batch_size)
        #: This Beat's row in the Beats' registry (written by a thread of its own once
        #: :meth:`start_sender` ran).
        self.registry = Registry(database, clock)
        #: Resumes the schedules whose pause ended (``resume_due``: the store's side).
        self.resumes = Resumes(resume_due, clock)
        #: A run is under way (a close() now comes from a signal handler inside it).
        self._in_run = False

    @property
    def models(self) -> Models:
        return self.database.models

    @property
    def held(self) -> HeldSends:
        """The jittered fires this Beat claimed, sent at their own time."""
        return self.held_sender.held

    @property
    def metrics(self) -> Metrics | None:
        return self.checkup.metrics

    @metrics.setter
    def metrics(self, metrics: Metrics | None) -> None:
        self.checkup.metrics = self.held_sender.metrics = metrics

    def run(self, max_interval: float) -> float:
        """Do every kind of work that is due; the seconds until the next is due."""
        self._in_run = True
        try:
            return self._run(max_interval)
        finally:
            self._in_run = False

    def _run(self, max_interval: float) -> float:
        self._tend_held()
        left = self.wake.database_wait(self.clock(), time.monotonic())
        if left is not None:  # woken for a held send: the database work is not due
            return nap(min(left, max_interval), self.held_sender.wake_in(self.clock()))
        now = self.clock()
        self.registry.ticked(now)
        self.resumes.on_tick(now)
        self.partitions.on_tick(now)
        current = self.probe()
        fires, checks, pending, confirms = current.due(now, self.wake.ahead)
        busy = worked = False
        if fires or pending or confirms:
            worked = True
            started = time.monotonic()
            while True:
                busy = self.dispatch_due(now, max_interval)
                busy = self.publish_pending(now) or busy
                busy = self.confirm_deliveries(now) or busy
                self._tend_held()
                if not busy or time.monotonic() - started > self.tick_budget:
                    break
                now = self.clock()
        if self.checkup.due(self.clock(), checks):
            worked = True
            self.check_health(self.clock())
            self._tend_held()
        if busy:
            return 0.0
        if worked:
            current = self.probe()
        now, monotonic = self.clock(), time.monotonic()
        delay = until_database_work(
            now=now,
            monotonic=monotonic,
            max_interval=max_interval,
            wake_at=current.earliest(self.wake.ahead),
            alerts_in=self.alerts.wait_in(now),
            sweep_at=self.checkup.sweep_at,
            lease_ttl=self.database.settings.lease_ttl,
        )
        return self.wake.sleep(delay, self.held_sender.wake_in(now), now, monotonic)

    def _tend_held(self) -> None:
        self.held_sender.tend()
        if not self.held_sender.threaded:
            self.wake.lead = 0.0  # no thread to send fires decided ahead at their time

    def start_sender(self) -> None:
        """Send held fires from a thread of their own from now on, with a producer of its
        own from the app's pool, and do the side work (alerts, partitions) from threads
        of its own; :meth:`close` stops them."""
        self.registry.start()
        self.resumes.start()
        self.alerts.start()
        self.partitions.start(self.clock)
        self.held_sender.start(lambda: self.app.producer_pool.acquire(block=True))

    def close(self) -> None:
        """Stop the threads (the side threads without waiting), mark what was sent, give
        back the held fires not sent, and remove this Beat's registry row."""
        self.registry.stop()
        self.resumes.stop()
        self.alerts.stop()
        self.partitions.stop()
        self.held_sender.stop()
        self.wake.lead = 0.0
        if self._in_run:
            # Celery's Beat closes its scheduler from its SIGTERM handler, here inside
            # a run that may hold a write transaction (on SQLite, a lock this thread
            # would wait 30 s for). Its Service closes it again once the run unwound.
            return
        self.held_sender.give_back()
        self.registry.remove()

    def probe(self) -> Probe:
        confirm = self.database.settings.confirm_delivery_after is not None
        with self.database.autocommit() as conn:
            return schedule_rows.probe(conn, self.models, confirm=confirm, claim_ahead=CLAIM_AHEAD)

    def dispatch_due(self, now: datetime, max_interval: float) -> bool:
        """Decide, record and publish the fires of the schedules due now; True: a full
        batch (call again)."""
        started = time.monotonic()
        with self.dispatcher.due(now, max_interval, self.wake.ahead) as dispatched:
            published = self._send_now(dispatched.send, dispatched.payloads, dispatched.committed)
        # Committed: the held fires may go out from now on.
        self.held_sender.hold(dispatched.holds)
        if dispatched.claimed and self.held_sender.threaded:
            self.wake.batch_took(time.monotonic() - started)
        self._settle(published)
        return dispatched.full

    def publish_pending(self, now: datetime) -> bool:
        """Claim the pending fires due within the hold window; publish those due now and
        hold the others (:mod:`.held`). True: a full batch."""
        claimed = self.dispatcher.pending(now)
        self.held_sender.hold(claimed.holds)
        self._publish(claimed)
        return claimed.full

    def confirm_deliveries(self, now: datetime) -> bool:
        """Publish again the sent fires that no worker ever started (opt-in)."""
        found = self.dispatcher.unconfirmed(now)
        self._publish(found)
        return found.full

    def check_health(self, now: datetime) -> None:
        """The lost-run sweep when due, and the health checks due (:class:`.Checkup`)."""
        self.checkup.run(now)

    def _publish(self, dispatched: Dispatched) -> None:
        """Send the fires of a committed batch through the Beat's producer, mark them."""
        if dispatched.send:
            self._settle(send(self.app, dispatched.send, dispatched.payloads, self.producer()))

    def _send_now(
        self, fires: list[Fire], payloads: dict[str, Payload], committed: Callable[[], None] | None
    ) -> Published:
        """Send ``fires`` through the Beat's producer, none before ``committed()`` has
        returned (:func:`.publisher.send`); leaving the dispatch's block waits for it
        when there is nothing to send."""
        if not fires:
            return Published()
        try:
            producer = self.producer()
        except BaseException:
            if committed is not None:
                committed()  # recorded all the same: the fires are published again later
            raise
        return send(self.app, fires, payloads, producer, wait_for_commit=committed)

    def _settle(self, published: Published) -> None:
        """After a send from the tick: mark the sent fires ``sent`` and put the schedules
        whose payload was refused in error."""
        mark(self.database, published.sent, self.clock)
        if published.refused:
            self.held_sender.refuse(published.refused)
        metrics = self.metrics
        if metrics is not None:
            metrics.observe_sent(published.sent, self.clock())
