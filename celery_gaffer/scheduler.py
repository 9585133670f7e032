"""The Beat scheduler: ``celery -A proj beat -S gaffer``.

A thin adapter of Celery's ``beat.Scheduler`` interface over :class:`~.beat.tick.Tick`,
which does the work of each tick (due fires into the ledger and out to the broker, then
health). Schedules live in the database, so Celery's in-memory schedule stays empty.
"""

from __future__ import annotations

import gc
import logging
import threading
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any

from celery import beat
from sqlalchemy.exc import DBAPIError

from .beat.metrics import Metrics, require_client
from .beat.publisher import declaring_once_a_batch
from .beat.startup import cannot_start, stoppable_start
from .beat.tick import MAX_PUBLISHES, Tick
from .clock import Clock, utcnow
from .exceptions import DatabaseNotReady, DatabaseUnavailable, GafferError
from .schedule_store import ScheduleStore
from .store import Database, database_for
from .store.database import driver_reason, fix_for, is_permanent

# Longest wait between two attempts to reach the database at start-up, in seconds.
START_BACKOFF_MAX = 30.0
# Most schedules whose ended pause one look resumes (the rest at the next look).
RESUME_BATCH = 500

logger = logging.getLogger("celery_gaffer.scheduler")

__all__ = ["MAX_PUBLISHES", "Scheduler"]


class Scheduler(beat.Scheduler):  # type: ignore[misc]
    """Celery Beat scheduler whose schedules and tick ledger live in the Gaffer database.

    Safe to build with ``lazy=True`` (nothing is read or written then). ``tick`` sends
    every due fire and returns the seconds until the next one, at most ``max_interval``.

    A condition Beat cannot start with (an invalid setting, a database that is missing,
    not migrated, at an unknown revision, read-only, or refusing its role) is logged as
    one CRITICAL line naming the cause and the fix, then ``SystemExit(2)`` is raised
    with the ``GafferError`` as its ``__cause__``: ``celery beat``
    exits with status 2 and no traceback.
    """

    #: Longest sleep between ticks: an edit made through the CLI or ScheduleStore is
    #: picked up by the next tick, so this bounds how long that takes.
    max_interval = 5.0
    #: Schedules (and pending fires) handled per transaction.
    batch_size = 1000
    #: Longest a tick keeps dispatching before it lets Beat's loop run (it returns 0).
    tick_budget = 1.0

    def __init__(
        self,
        app: Any,
        *args: Any,
        clock: Clock = utcnow,
        sleep: Callable[[float], None] = time.sleep,
        sender_thread: bool | None = None,
        **kwargs: Any,
    ) -> None:
        self._clock = clock
        #: Held fires go out from a thread of their own (default: on the real clock;
        #: a test driving an injected clock sends them from tick() instead).
        self._sender_thread = clock is utcnow if sender_thread is None else sender_thread
        self._froze = False
        #: How Beat waits between attempts to reach its database at start-up.
        self.sleep = sleep
        try:
            self.database: Database = database_for(app)
            if self.database.settings.metrics_port is not None:
                require_client()  # the metrics extra, checked before anything starts
        except GafferError as exc:  # an invalid gaffer_* setting, a missing extra
            cannot_start(exc)
        self._tick_state = Tick(
            app,
            self.database,
            clock,
            lambda: self.producer,
            resume_due=self._resume_due,
            batch_size=self.batch_size,
            tick_budget=self.tick_budget,
        )
        self._failed_ticks = 0
        if len(args) < 3:  # Celery's Producer argument (its fourth), unless given in place
            # Beat's producer, which Celery makes from it, declares a queue once a batch.
            producer_class = kwargs.get("Producer") or app.amqp.Producer
            kwargs["Producer"] = declaring_once_a_batch(producer_class)
        super().__init__(app, *args, **kwargs)

    @property
    def metrics(self) -> Metrics | None:
        return self._tick_state.metrics

    # -- celery.beat.Scheduler interface ----------------------------------------------

    def setup_schedule(self) -> None:
        """Check the database is migrated and sync ``beat_schedule`` into it (source config).

        A database that cannot be reached (down, restarting, a full disk) is waited for,
        with backoff and one log line per attempt: Beat starts when it comes back. A
        mistake to fix rather than wait out (see the class docstring) ends Beat with
        exit status 2. SIGTERM and SIGINT end the wait at once.
        """
        with stoppable_start(self.database.settings.masked_url):
            try:
                self._wait_for_database()
            except GafferError as exc:
                cannot_start(exc)
            # Still within the handlers: Celery's would build a second Scheduler while
            # this one is not yet Beat's, and leave this one's threads running.
            try:
                self._start_side_work()
            except BaseException:
                self.close()
                raise

    def _start_side_work(self) -> None:
        """The sender, alert and partition threads, and the metrics server."""
        settings = self.database.settings
        if self._sender_thread:
            self._tick_state.start_sender()
            if not self._froze:
                self._froze = _freeze()
        if settings.metrics_port is not None and self._tick_state.metrics is None:
            # Per-schedule gauges appear as Beat checks each schedule (check_at).
            try:
                self._tick_state.metrics = Metrics(settings.metrics_port)
            except OSError as exc:
                # A second Beat on this host: it fires all the same, without metrics.
                logger.warning(
                    "metrics not served: port %d on 127.0.0.1: %s",
                    settings.metrics_port,
                    exc.strerror or exc,
                    extra={"action": "metrics_port_unavailable"},
                )

    def _wait_for_database(self) -> None:
        """Try until the database answers; raise GafferError for what waiting cannot fix."""
        settings = self.database.settings
        delay = 1.0
        while True:
            try:
                self.database.check_ready()
                self.app.loader.import_default_modules()
                ScheduleStore(self.app, clock=self._clock, source="config").sync_config(
                    self.app.conf.beat_schedule or {}
                )
                return
            except (DatabaseUnavailable, DBAPIError) as exc:
                if is_permanent(exc):
                    reason = driver_reason(exc.__cause__ or exc)
                    raise DatabaseNotReady(
                        f"the Gaffer database at {settings.masked_url} refused it: "
                        f"{reason}; {fix_for(exc)}"
                    ) from exc
                logger.error(
                    "Beat cannot start yet: %s; trying again in %.0f s",
                    str(exc) if isinstance(exc, GafferError) else driver_reason(exc),
                    delay,
                    extra={"action": "beat_waiting_for_database"},
                )
                self.sleep(delay)
                delay = min(delay * 2, START_BACKOFF_MAX)

    def _resume_due(self, now: datetime) -> list[str]:
        """Resume the paused schedules whose ``paused_until`` is at or before ``now``, as
        ``resume`` does, recorded in the audit log as Beat's; their names."""
        store = ScheduleStore(self.app, clock=self._clock, actor="beat", audit_source="beat")
        return store.resume_due(now, limit=RESUME_BATCH)

    def tick(self, *args: Any, **kwargs: Any) -> float:
        """Dispatch every due fire; return the seconds until the next one is due.

        A database that cannot be reached (a restart, a failover) is logged and retried
        on the next tick: Beat keeps running, and the ledger makes the retry safe.
        """
        try:
            delay = self._tick_state.run(self.max_interval)
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

    def sync(self) -> None:
        """Nothing to do: every tick's state is committed as it happens."""

    def close(self) -> None:
        super().close()
        self._tick_state.close()
        if self._froze:
            self._froze = False
            _unfreeze()  # an embedded Beat's process goes on without it
        metrics = self._tick_state.metrics
        if metrics is not None:
            metrics.close()
            self._tick_state.metrics = None

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


# Beats of this process that froze the garbage collector's view of start-up objects.
_freezers = 0
_freezers_lock = threading.Lock()
# At most what the interpreter keeps frozen by itself: CPython 3.12 starts with its built-in
# types' immortal base and MRO tuples frozen (375 on 3.12.1), other versions with none. A
# process that froze its own objects froze every object alive then: thousands at least.
_INTERPRETER_FROZEN = 1_000


def _freeze() -> bool:
    """Move everything loaded so far (Celery, SQLAlchemy, kombu, the models: it lives as
    long as Beat) out of the collector's full passes, which otherwise pause every thread,
    the sender's too, for 0.1-0.2 s every few seconds under load. Once per process, and
    not at all when the process froze objects itself; True: this Beat counts as one."""
    global _freezers
    with _freezers_lock:
        if _freezers == 0:
            if gc.get_freeze_count() > _INTERPRETER_FROZEN:
                return False  # the host process manages its own freeze
            gc.collect()
            gc.freeze()
        _freezers += 1
        return True


def _unfreeze() -> None:
    """The last Beat that froze gives the objects back to the collector."""
    global _freezers
    with _freezers_lock:
        _freezers -= 1
        if _freezers == 0:
            gc.unfreeze()
