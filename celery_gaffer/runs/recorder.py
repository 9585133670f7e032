"""Signal receivers that write one ``gaffer_job_runs`` row per delivery.

Connected by :func:`celery_gaffer.install` for one app (receivers check the sender's
app), each with a ``dispatch_uid``. A row is written for every delivery of a GafferTask
and of a task sent by the Gaffer scheduler (its message carries ``gaffer_*`` headers):
``running`` at ``task_prerun``, its final state at ``task_postrun`` (``succeeded``,
``failed``, ``retrying``, or the ``duplicate`` / ``skipped`` / ``fence_lost`` outcome the
run set; in a worker, usually written a moment later by :mod:`.endings`' thread),
``revoked`` from ``task_revoked``. The start record keeps the delivery's ``args`` and
``kwargs``, the end record of a failure (or retry) its traceback, both bounded in size
(:mod:`.details`). While a run is ``running`` a heartbeat keeps
its ``updated_at`` fresh; Beat marks a row whose heartbeat stopped ``lost``. A failure to
write a row is logged with the run's id and never breaks the task.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from functools import partial
from typing import Any, TypeVar

from celery import signals, states
from sqlalchemy.exc import DBAPIError

from ..exceptions import DatabaseUnavailable
from ..fencing.leases import Lease
from ..protocol import ERROR_LENGTH, FireHeaders, RunState
from ..settings import settings_for
from ..store import Database, database_for
from ..store import fires as ledger
from ..store import runs as run_rows
from ..store import schedules as schedule_rows
from ..store.database import driver_reason
from .delivery import Delivery, DeliveryPolicy, first_delivery
from .details import bounded_arguments, bounded_traceback, traceback_of
from .endings import Grouped, Write, end_writer
from .heartbeat import heartbeat_for
from .overlap import left_held, overlap_to_take, record_end, release_quietly, start_taking
from .pings import END_EVENTS, ping
from .tracing import run_ended, run_started

logger = logging.getLogger("celery_gaffer.runs")

T = TypeVar("T")

# Celery's final states, as run states (a Gaffer outcome set by the run overrides them).
_CELERY_STATES = {
    states.SUCCESS: RunState.SUCCEEDED,
    states.RETRY: RunState.RETRYING,
    states.REVOKED: RunState.REVOKED,
}
# Outcomes whose run record keeps the error.
_WITH_ERROR = (RunState.FAILED, RunState.FENCE_LOST, RunState.RETRYING)


def records_end(delivery: Delivery, database: Database) -> bool:
    """Whether task_postrun will record this run's end (and can free its leases with it)."""
    return database.dialect == "postgresql" and delivery.row_id is not None


def connect(app: Any) -> None:
    """Connect the receivers for ``app`` (a second call for the same app changes nothing)."""
    uid = f"celery_gaffer.runs:{id(app)}"
    recorder = Recorder(app)
    signals.task_prerun.connect(recorder.prerun, weak=False, dispatch_uid=uid + ":prerun")
    signals.task_postrun.connect(recorder.postrun, weak=False, dispatch_uid=uid + ":postrun")
    signals.task_failure.connect(recorder.failure, weak=False, dispatch_uid=uid + ":failure")
    signals.task_revoked.connect(recorder.revoked, weak=False, dispatch_uid=uid + ":revoked")
    signals.task_retry.connect(recorder.retry, weak=False, dispatch_uid=uid + ":retry")


def _seconds_until(when: Any) -> float:
    """Seconds from now until a Retry's ``when`` (an ETA, a countdown, or None)."""
    if isinstance(when, datetime):
        eta = when if when.tzinfo else when.replace(tzinfo=timezone.utc)
        return max((eta - datetime.now(timezone.utc)).total_seconds(), 0.0)
    if isinstance(when, (int, float)):
        return max(float(when), 0.0)
    return 0.0


def _run_key(task: Any, args: Any, kwargs: Any) -> str | None:
    """The idempotency key of a GafferTask run (None: no key, or not computable here)."""
    if not isinstance(task, DeliveryPolicy) or args is None or kwargs is None:
        return None
    try:
        return task.gaffer_delivery_key(tuple(args), dict(kwargs))
    except Exception:  # noqa: BLE001 - the run itself reports a bad key, with its field
        return None


def once_more_if_stale(attempt: Callable[[], T]) -> T:
    """``attempt()``, tried a second time when its pooled connection was found dead (a
    database restart leaves every idle connection stale; SQLAlchemy then discards the
    pool, so the second try connects afresh)."""
    try:
        return attempt()
    except (DBAPIError, DatabaseUnavailable) as exc:
        cause = exc if isinstance(exc, DBAPIError) else exc.__cause__
        if not (isinstance(cause, DBAPIError) and cause.connection_invalidated):
            raise
        return attempt()


def _unreachable(exc: BaseException) -> bool:
    """Whether ``exc`` says the database could not be reached (not a statement's error)."""
    if isinstance(exc, DatabaseUnavailable):
        return True
    return isinstance(exc, DBAPIError) and bool(exc.connection_invalidated)


def _record_failed(what: str, task_id: str, exc: BaseException) -> None:
    """One WARNING line: the run goes on without that record (no traceback)."""
    reason = driver_reason(exc) if isinstance(exc, DBAPIError) else str(exc)
    logger.warning(
        "could not record the %s of run %s: %s: %s",
        what,
        task_id,
        type(exc).__name__,
        " ".join(reason.split())[:300],
        extra={"action": "run_record_failed", "task_id": task_id},
    )


class Recorder:
    """The receivers of one app."""

    def __init__(self, app: Any) -> None:
        self.app = app

    @property
    def database(self) -> Database:
        return database_for(self.app)

    def _mine(self, task: Any) -> bool:
        if task is None or getattr(task, "app", None) is not self.app:
            return False
        return isinstance(task, DeliveryPolicy) or bool(FireHeaders.of(task.request).schedule)

    def prerun(
        self,
        sender: Any = None,
        task_id: str | None = None,
        task: Any = None,
        args: Any = None,
        kwargs: Any = None,
        **_: Any,
    ) -> None:
        task = task or sender
        if task_id is None or not self._mine(task):
            return
        request = task.request
        delivery = Delivery.of(request)
        now = delivery.started_at = datetime.now(timezone.utc)
        headers = delivery.headers
        trace_id = run_started(task, delivery)
        try:
            database = self.database
            # A GafferTask's key state comes back with the row id: the run needs it
            # first thing, and this saves it a round trip.
            key = _run_key(task, args, kwargs)
            params = {
                "task_id": task_id,
                "task_name": task.name,
                "schedule": headers.schedule,
                "nominal_at": headers.nominal,
                "key": headers.key,
                "started_at": now,
                "worker": request.hostname,
                "run_key": key,
                "trace_id": trace_id,
            }
            if settings_for(self.app).run_arguments:
                params.update(args=bounded_arguments(args), kwargs=bounded_arguments(kwargs))
            else:
                params.update(args=None, kwargs=None)
            counted = not first_delivery(request)
            overlap = overlap_to_take(task, database)

            def record_start() -> Any:
                if overlap is not None:
                    # The run's overlap lease is taken by the same statement.
                    return start_taking(
                        database,
                        params,
                        with_key_state=key is not None,
                        overlap=overlap,
                        delivery=delivery,
                        hostname=request.hostname,
                        counted=counted,
                    )
                statement = run_rows.start_statement(
                    database.models, with_key_state=key is not None, counted=counted
                )
                with database.autocommit(relaxed=True) as conn:
                    return conn.execute(statement, params).one()

            row = once_more_if_stale(record_start)
            if key is not None:
                delivery.key_state = (key, row[1])
            delivery.row_id = row[0]
            heartbeat_for(self.app).add(row[0])
        except Exception as exc:  # noqa: BLE001 - a run record never breaks the task
            _record_failed("start", task_id, exc)
        ping(headers.ping, "start", task_id)

    def failure(
        self,
        sender: Any = None,
        exception: BaseException | None = None,
        einfo: Any = None,
        **_: Any,
    ) -> None:
        if exception is not None and self._mine(sender):
            delivery = Delivery.of(sender.request)
            delivery.error = exception
            delivery.traceback = traceback_of(exception, einfo)

    def retry(self, sender: Any = None, reason: Any = None, einfo: Any = None, **_: Any) -> None:
        if reason is not None and self._mine(sender):
            delivery = Delivery.of(sender.request)
            # Celery's Retry wraps the error that caused it.
            delivery.error = getattr(reason, "exc", None) or reason
            delivery.retry_in = _seconds_until(getattr(reason, "when", None))
            error = delivery.error
            delivery.traceback = traceback_of(
                error if isinstance(error, BaseException) else None, einfo
            )

    def postrun(
        self,
        sender: Any = None,
        task_id: str | None = None,
        task: Any = None,
        state: str | None = None,
        **_: Any,
    ) -> None:
        task = task or sender
        if task_id is None or not self._mine(task):
            return
        request = task.request
        delivery = Delivery.find(request)
        if delivery is None:
            return
        outcome = delivery.outcome or _CELERY_STATES.get(state or "", RunState.FAILED)
        run_ended(delivery, outcome)
        if delivery.row_id is None:
            return
        row_id = delivery.row_id
        now = datetime.now(timezone.utc)
        started = delivery.started_at or now
        values: dict[str, Any] = {
            "state": outcome,
            "finished_at": now,
            "duration": (now - started).total_seconds(),
        }
        if delivery.run_key is not None:
            values["key"] = delivery.run_key
        if delivery.run_fence is not None:
            values["fence"] = delivery.run_fence
        error = delivery.error
        if error is not None and outcome in _WITH_ERROR:
            values["error_type"] = type(error).__name__[:255]
            values["error_message"] = str(error)[:ERROR_LENGTH]
            if delivery.traceback is not None:
                values["traceback"] = bounded_traceback(delivery.traceback)
        elif delivery.reason is not None:
            values["error_message"] = delivery.reason[:ERROR_LENGTH]
        headers = delivery.headers
        database = self.database
        # Leases the run left held: the statement that records its end frees them.
        held = left_held(delivery, database)

        def end(held: list[Lease]) -> list[Lease]:
            with database.autocommit(relaxed=True) as conn:
                held = record_end(conn, database, values, row_id, held)
                if headers.schedule:
                    schedule_rows.update_schedule_facts(
                        conn, database.models, headers.schedule, outcome, headers.nominal
                    )
                confirm_after = database.settings.confirm_delivery_after
                if outcome == RunState.RETRYING and confirm_after is not None and headers.key:
                    # The retry is a new message, which the broker can lose like the
                    # first: check its fire again once the retry had time to start.
                    wait = (delivery.retry_in or 0.0) + confirm_after
                    ledger.reopen(
                        conn,
                        database.models,
                        [task_id],
                        sent_at=now,
                        publish_after=now + timedelta(seconds=wait),
                    )
                return held

        def write() -> None:
            left = held
            try:
                # A stale connection fails on the first statement: nothing was written yet.
                left = once_more_if_stale(lambda: end(held))
            except Exception as exc:  # noqa: BLE001 - a run record never breaks the task
                _record_failed("end", task_id, exc)
            finally:
                # Kept fresh until its end is written: a queued end is not a lost run.
                heartbeat_for(self.app).discard(row_id)
                release_quietly(left)

        waited_on = (
            held  # the end record frees them: the next run may need them now
            or outcome == RunState.RETRYING  # its fire is reopened: checked again
            or request.called_directly
            or request.is_eager
        )
        queued: Write = write
        if not (waited_on or headers.schedule):
            # Only its run row to update: written with the ends queued beside it.
            queued = Grouped(
                (database.settings.database_url, database.models.prefix, tuple(sorted(values))),
                (row_id, task_id, values),
                partial(self.write_ends, database),
            )
        writer = end_writer()
        if waited_on or not writer.submit(queued):
            writer.write_in_order(queued)
        if outcome in END_EVENTS:
            ping(headers.ping, END_EVENTS[outcome], task_id)

    def write_ends(self, database: Database, ends: list[tuple[Any, str, dict[str, Any]]]) -> None:
        """Record the ends of runs that hold nothing and belong to no schedule, ``(row
        id, task id, values)`` each, all with the same columns, in one statement; when
        that fails on a statement error, each alone (each failure logged with its run)."""
        heartbeat = heartbeat_for(self.app)

        def write(some: list[tuple[Any, str, dict[str, Any]]]) -> None:
            with database.autocommit(relaxed=True) as conn:
                run_rows.finish_runs(
                    conn, database.models, [(row_id, values) for row_id, _, values in some]
                )

        try:
            once_more_if_stale(lambda: write(ends))
        except Exception as exc:  # noqa: BLE001 - a run record never breaks the task
            if len(ends) > 1 and not _unreachable(exc):
                for end in ends:  # one bad row does not cost the others their record
                    self.write_ends(database, [end])
                return
            for _, task_id, _ in ends:
                _record_failed("end", task_id, exc)
        finally:
            # Kept fresh until its end is written: a queued end is not a lost run.
            for row_id, _, _ in ends:
                heartbeat.discard(row_id)

    def revoked(
        self, sender: Any = None, request: Any = None, terminated: bool = False, **_: Any
    ) -> None:
        if request is None or not self._mine(sender):
            return
        now = datetime.now(timezone.utc)
        headers = FireHeaders.of(getattr(request, "request_dict", None) or {})
        try:
            database = self.database
            with database.begin() as conn:
                run_rows.record_revoked(
                    conn,
                    database.models,
                    request.id,
                    now,
                    {
                        "task_name": sender.name,
                        "schedule": headers.schedule,
                        "nominal_at": headers.nominal,
                        "key": headers.key,
                        "worker": getattr(request, "hostname", None),
                    },
                )
        except Exception as exc:  # noqa: BLE001 - a run record never breaks the task
            _record_failed("revocation", getattr(request, "id", "?"), exc)
        ping(headers.ping, "fail", getattr(request, "id", None))
