"""Sending the fires a Beat holds (:mod:`.held`) at their time, and what follows a send.

:class:`HeldSender` owns the thread that sends them (:class:`Sender`), the marking of
the sent ones, and the schedules whose payload the broker refused, held or not (they go
to ``error``). Without a thread, the tick sends the held fires due each time it calls
:meth:`HeldSender.tend`. With one, the thread sends them and never waits for the
database (a commit may wait for the disk): it leaves marking them, and recording
refusals, to the tick's next :meth:`~HeldSender.tend`. A held fire is handed over only
once the transaction that recorded it has committed.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Any

from ..clock import Clock
from ..exceptions import one_line
from ..store import Database
from ..store import fires as ledger
from ..store import schedules as schedule_rows
from ..store.fires import Fire
from ..store.schedules import Payload
from .dispatch import Hold
from .held import HeldSends
from .marking import mark_groups
from .metrics import Metrics
from .publisher import Published, send
from .rows import ErrorMove, RowChecks, record_moves

logger = logging.getLogger("celery_gaffer.scheduler")

#: Longest the sender thread sleeps without looking again (a clock stepped forward).
SENDER_NAP = 0.5
#: How long the sender waits after a failed round (the database or broker down).
SENDER_BACKOFF = 1.0


class HeldSender:
    """Publishes one Beat's held fires at their send time, marks them, records refusals."""

    def __init__(
        self,
        app: Any,
        database: Database,
        clock: Clock,
        producer: Callable[[], Any],
        rows: RowChecks,
    ) -> None:
        self.app, self.database, self.clock = app, database, clock
        #: The Beat's producer (Celery makes it on first use), when the tick sends.
        self.producer = producer
        self.rows = rows
        #: The fires held, by send time.
        self.held = HeldSends()
        self.metrics: Metrics | None = None
        self._thread: Sender | None = None
        #: Payloads the broker refused to the thread, for the tick to record.
        self._refusals: deque[dict[str, str]] = deque()

    @property
    def threaded(self) -> bool:
        """Whether a thread of its own sends the held fires (:meth:`start`)."""
        return self._thread is not None

    def hold(self, holds: Iterable[Hold]) -> None:
        """Hold fires whose transaction has committed, each until its send time."""
        for hold in holds:
            self.held.hold(hold.fire, hold.payload, hold.send_at, hold.claimed_until)

    def start(self, acquire: Callable[[], Any]) -> None:
        """Send from a thread of its own from now on, through a producer it takes with
        ``acquire()`` (and releases when it ends)."""
        if self._thread is None:
            self._thread = Sender(self.held, self.clock, self._send_from_thread, acquire)
            self._thread.start()

    def _send_from_thread(self, producer: Callable[[], Any]) -> None:
        self.send_due(producer, in_thread=True)

    def tend(self) -> None:
        """From the tick: send the held fires due (no thread), or mark those the thread
        sent and record the payloads the broker refused it. A thread that stopped is
        logged, and the tick sends from then on."""
        if self._thread is not None and not self._thread.alive:
            logger.error(
                "the thread sending held fires has stopped; Beat sends them itself",
                extra={"action": "held_sender_stopped"},
            )
            self._thread = None
        if self._thread is None:
            self.send_due()
            return
        self._record_refusals()
        self.mark(self.clock())

    def wake_in(self, now: datetime) -> float | None:
        """Seconds until the tick has held work: a send (no thread) or a marking (with
        one: due :data:`.MARK_EVERY` after a send at the latest); None: none."""
        return self.held.wait_in(now) if self._thread is None else self.held.marking_in(now)

    def send_due(
        self, producer: Callable[[], Any] | None = None, *, in_thread: bool = False
    ) -> None:
        """Publish the held fires whose send time has come (through ``producer()``, by
        default the Beat's); mark the sent ones in time (not ``in_thread``: the thread
        leaves marking, and recording refused payloads, to the tick)."""
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
            published = send(self.app, fires, payloads, (producer or self.producer)())
            refused = self._sent(published, in_thread)
            due = [(fire, payload) for fire, payload in later if fire.schedule not in refused]
        if not in_thread:
            self.mark(now)

    def _sent(self, published: Published, in_thread: bool) -> dict[str, str]:
        self.held.sent(published.sent, self.clock())
        if published.refused:
            self.held.drop(published.refused)
            if in_thread:
                self._refusals.append(published.refused)
            else:
                self._record_refused(published.refused)
        metrics = self.metrics  # the thread's view: close() may clear it
        if metrics is not None:
            metrics.observe_sent(published.sent, self.clock())
        return published.refused

    def mark(self, now: datetime) -> None:
        """Mark the sent held fires ``sent`` when it is time (:meth:`.HeldSends.to_mark`)."""
        marking = self.held.to_mark(now)
        if marking:
            try:
                mark_groups(self.database, marking)
            except Exception:
                for at, fires in marking:
                    self.held.sent(fires, at)  # marked on a later run
                raise

    def refuse(self, refused: dict[str, str]) -> None:
        """From the tick: the broker refused these schedules' payloads (sent now, not
        held). Their held fires wait in the ledger with the rest (claimed again when
        their claims run out), rather than being refused one by one."""
        self.held.drop(refused)
        self._record_refused(refused)

    def _record_refusals(self) -> None:
        """Record the refusals the thread queued (each taken once recorded)."""
        while self._refusals:
            self._record_refused(self._refusals[0])
            self._refusals.popleft()

    def _record_refused(self, refused: dict[str, str]) -> None:
        """Put the schedules whose payload the broker refused in error."""
        for name, reason in refused.items():
            self.rows.report_error(name, reason)
        models = self.database.models
        with self.database.begin() as conn:
            before = schedule_rows.load_payloads(conn, models, refused)
            # Not loaded again by itself: the row validates, so each recheck would
            # add a fire the broker refuses again. Fixing its options (update,
            # --replace) or resuming it clears the error; its pending fires wait.
            schedule_rows.mark_errors(conn, models, refused, None)
            moves = [
                ErrorMove(name, before[name].error, reason)
                for name, reason in refused.items()
                if name in before and before[name].error != reason
            ]
            record_moves(conn, models, moves, self.clock())

    def stop(self) -> None:
        """Stop the thread (the tick sends from then on); it may be inside a round."""
        if self._thread is not None:
            if not self._thread.stop():
                logger.warning(
                    "the thread sending held fires is still publishing at shutdown; a "
                    "fire it sends now stays claimed, and any Beat sends it again once "
                    "its claim runs out (same task id and key: harmless)",
                    extra={"action": "held_sender_busy_at_shutdown"},
                )
            self._thread = None

    def give_back(self) -> None:
        """At shutdown: mark what was sent, and give back the held fires not sent (one
        line if the database cannot be reached: any Beat publishes them once their claim
        runs out)."""
        try:
            self._record_refusals()
            marking = self.held.to_mark(self.clock(), force=True)
            if marking:
                mark_groups(self.database, marking)
            claims = self.held.release()
            if claims:
                with self.database.begin() as conn:
                    ledger.unclaim(conn, self.database.models, claims)
        except Exception as exc:  # noqa: BLE001 - stopping anyway; the ledger stays correct
            logger.warning(
                "could not give back held fires, or mark sent ones, at shutdown (%s); "
                "any Beat publishes them once their claim runs out (a repeat of a sent "
                "one is harmless: same task id and key)",
                one_line(exc),
                extra={"action": "held_fires_not_released"},
            )


class Sender:
    """A thread that runs ``send_held`` whenever a held fire's send time comes, so that
    held fires go out on time while the tick does database work (and marks them).

    ``send_held(producer)`` publishes through ``producer()`` and marks nothing
    (:meth:`HeldSender.send_due` from the thread).
    The thread takes its producer with ``acquire()`` on first use and releases it when
    it ends. A failed round is logged in one line and tried again after
    :data:`SENDER_BACKOFF` (the fires it took stay pending and claimed; any Beat
    republishes them once their claim runs out). If the thread ends anyway,
    :attr:`alive` says so, and the tick sends the held fires itself.
    """

    def __init__(
        self,
        held: HeldSends,
        clock: Clock,
        send_held: Callable[[Callable[[], Any]], None],
        acquire: Callable[[], Any],
        name: str = "gaffer-held-sends",
    ) -> None:
        self._held = held
        self._clock = clock
        self._send_held = send_held
        self._acquire = acquire
        self._producer: Any = None
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> bool:
        """Stop after the round under way (waits at most ``timeout`` seconds for it);
        False: the round is still under way (a broker that does not answer).

        Celery's Beat closes its scheduler from its SIGTERM handler, which may have
        interrupted this thread's tick inside a :class:`HeldSends` method: the lock is
        then ours, the sender cannot wake until that method returns, and waiting for
        it would only take ``timeout``. It stops as soon as the lock is free.
        """
        with self._held.changed:
            self._stopping.set()
            self._held.changed.notify_all()
        if self._thread is threading.current_thread() or self._held.changed.held_here():
            return True
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def _producer_now(self) -> Any:
        if self._producer is None:
            self._producer = self._acquire()
        return self._producer

    def _run(self) -> None:
        try:
            while not self._stopping.is_set():
                self._round()
        finally:
            producer, self._producer = self._producer, None
            if producer is not None:
                producer.release()

    def _round(self) -> None:
        try:
            with self._held.changed:  # reentrant: held while wait_in looks
                wait = self._held.wait_in(self._clock(), marks=False)
                if wait is None or wait > 0:
                    self._held.changed.wait(SENDER_NAP if wait is None else min(wait, SENDER_NAP))
                if self._stopping.is_set():
                    return
            self._send_held(self._producer_now)
        except Exception as exc:  # noqa: BLE001 - a thread must not die of one round
            logger.error(
                "could not send held fires (%s); trying again in %.0f s (any Beat "
                "republishes them once their claim runs out)",
                one_line(exc),
                SENDER_BACKOFF,
                extra={"action": "held_send_failed"},
            )
            with self._held.changed:
                if not self._stopping.is_set():
                    self._held.changed.wait(SENDER_BACKOFF)
