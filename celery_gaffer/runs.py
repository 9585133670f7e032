"""Signal receivers that write one ``gaffer_job_runs`` row per delivery.

Connected by :func:`celery_gaffer.install` for one app (receivers check the sender's
app), each with a ``dispatch_uid``. A row is written for every delivery of a GafferTask
and of a task sent by the Gaffer scheduler (its message carries ``gaffer_*`` headers):
``running`` at ``task_prerun``, its final state at ``task_postrun`` (``succeeded``,
``failed``, ``retrying``, or the ``duplicate`` / ``skipped`` / ``fence_lost`` outcome the
run set), ``revoked`` from ``task_revoked``. While a run is ``running`` a heartbeat keeps
its ``updated_at`` fresh; Beat marks a row whose heartbeat stopped ``lost``. A failure to
write a row is logged with the run's id and never breaks the task.
"""

from __future__ import annotations

import logging
import os
import threading
from datetime import datetime, timedelta, timezone
from typing import Any

from celery import signals, states
from sqlalchemy import Connection, case, insert, select, update

from .confirm import reopen
from .run_leases import (
    left_held,
    overlap_to_take,
    record_end,
    release_quietly,
    start_taking,
)
from .run_sql import start_statement
from .store import Database, database_for, lean
from .store.dbclock import db_now
from .store.models import ERROR_LENGTH, Models, table_of

logger = logging.getLogger("celery_gaffer.runs")

FAILURE_STATES = ("failed", "lost")
_ROW = "gaffer_run_row"
_STARTED = "gaffer_run_started"
_ERROR = "gaffer_run_error"
_RETRY_IN = "gaffer_run_retry_in"  # seconds until the retry's ETA
#: Request attribute: ``(key, state)`` of a GafferTask run's key, read at task_prerun.
KEY_STATE = "gaffer_prerun_key_state"


def records_end(request: Any, database: Database) -> bool:
    """Whether task_postrun will record this run's end (and can free its leases with it)."""
    return database.dialect == "postgresql" and getattr(request, _ROW, None) is not None


def connect(app: Any) -> None:
    """Connect the receivers for ``app`` (a second call for the same app changes nothing)."""
    uid = f"celery_gaffer.runs:{id(app)}"
    recorder = Recorder(app)
    signals.task_prerun.connect(recorder.prerun, weak=False, dispatch_uid=uid + ":prerun")
    signals.task_postrun.connect(recorder.postrun, weak=False, dispatch_uid=uid + ":postrun")
    signals.task_failure.connect(recorder.failure, weak=False, dispatch_uid=uid + ":failure")
    signals.task_revoked.connect(recorder.revoked, weak=False, dispatch_uid=uid + ":revoked")
    signals.task_retry.connect(recorder.retry, weak=False, dispatch_uid=uid + ":retry")


def parse_nominal(value: Any) -> datetime | None:
    if not value:
        return None
    try:
        return datetime.strptime(str(value), "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc)
    except ValueError:
        return None


def update_schedule_facts(
    conn: Connection, models: Models, schedule: str, state: str, nominal: datetime | None
) -> None:
    """Fold a finished run into its schedule's health facts and ask for a re-check."""
    table = table_of(models.Schedule)
    values: dict[str, Any] = {"check_at": db_now()}
    if state == "succeeded":
        values["consecutive_failures"] = 0
        values["last_success_at"] = db_now()
        if nominal is not None:
            current = table.c.last_success_nominal_at
            values["last_success_nominal_at"] = case(
                (current.is_(None), nominal), (current < nominal, nominal), else_=current
            )
    elif state in FAILURE_STATES:
        values["consecutive_failures"] = table.c.consecutive_failures + 1
    else:
        return
    conn.execute(update(table).where(table.c.name == schedule).values(**values))


def mark_lost(conn: Connection, models: Models, stale_after: float) -> list[tuple[str, str | None]]:
    """Mark ``running`` rows whose heartbeat stopped ``stale_after`` seconds ago ``lost``."""
    table = table_of(models.JobRun)
    stale = conn.execute(
        select(table.c.id, table.c.schedule, table.c.task_id)
        .where(table.c.state == "running", table.c.updated_at < db_now(-stale_after))
        .limit(1000)
    ).all()
    if not stale:
        return []
    conn.execute(
        update(table)
        .where(table.c.id.in_([row.id for row in stale]), table.c.state == "running")
        .values(
            state="lost",
            finished_at=db_now(),
            updated_at=db_now(),
            error_type="WorkerLost",
            error_message="no heartbeat: the worker died or was killed mid-run",
        )
    )
    for row in stale:
        if row.schedule:
            update_schedule_facts(conn, models, row.schedule, "lost", None)
    # With delivery confirmation on, a fire whose run was lost is checked again: if its
    # message went down with the worker and the broker, it is published again.
    reopen(conn, models, [row.task_id for row in stale], publish_after=db_now())
    return [(str(row.id), row.schedule) for row in stale]


class Heartbeat:
    """One thread per process refreshing ``updated_at`` of this process's running rows."""

    def __init__(self, database: Database) -> None:
        self.database = database
        self.rows: set[int] = set()
        self.lock = threading.Lock()
        self.pid = os.getpid()
        self.thread: threading.Thread | None = None

    def add(self, row_id: int) -> None:
        with self.lock:
            self.rows.add(row_id)
            if self.thread is None:
                self.thread = threading.Thread(
                    target=self._run, name="gaffer-heartbeat", daemon=True
                )
                self.thread.start()

    def discard(self, row_id: int) -> None:
        with self.lock:
            self.rows.discard(row_id)

    def _run(self) -> None:
        interval = self.database.settings.lease_ttl / 3
        table = table_of(self.database.models.JobRun)
        while True:
            threading.Event().wait(interval)
            with self.lock:
                rows = list(self.rows)
            if not rows:
                continue
            try:
                with self.database.begin() as conn:
                    conn.execute(
                        update(table)
                        .where(table.c.id.in_(rows), table.c.state == "running")
                        .values(updated_at=db_now())
                    )
            except Exception:
                logger.warning(
                    "run heartbeat failed", exc_info=True, extra={"action": "heartbeat_failed"}
                )


_heartbeats: dict[tuple[int, int], Heartbeat] = {}
_heartbeats_lock = threading.Lock()


def heartbeat_for(app: Any) -> Heartbeat:
    key = (id(app), os.getpid())  # a forked child starts its own thread
    with _heartbeats_lock:
        beat = _heartbeats.get(key)
        if beat is None:
            beat = _heartbeats[key] = Heartbeat(database_for(app))
        return beat


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
    run_key = getattr(task, "_run_key", None)
    if run_key is None or args is None or kwargs is None:
        return None
    try:
        key: str | None = run_key(tuple(args), dict(kwargs))
    except Exception:  # noqa: BLE001 - the run itself reports a bad key, with its field
        return None
    return key


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
        from .task import GafferTask

        return isinstance(task, GafferTask) or bool(getattr(task.request, "gaffer_schedule", None))

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
        now = datetime.now(timezone.utc)
        setattr(request, _STARTED, now)
        try:
            database = self.database
            # A GafferTask's key state comes back with the row id: the run needs it
            # first thing, and this saves it a round trip.
            key = _run_key(task, args, kwargs)
            params = {
                "task_id": task_id,
                "task_name": task.name,
                "schedule": getattr(request, "gaffer_schedule", None),
                "nominal_at": parse_nominal(getattr(request, "gaffer_nominal_at", None)),
                "key": getattr(request, "gaffer_key", None),
                "started_at": now,
                "worker": request.hostname,
                "run_key": key,
            }
            overlap = overlap_to_take(task, database)
            if overlap is not None:
                # The run's overlap lease is taken by the same statement.
                row = start_taking(
                    database,
                    params,
                    with_key_state=key is not None,
                    overlap=overlap,
                    request=request,
                )
            else:
                statement = start_statement(database.models, with_key_state=key is not None)
                with database.autocommit(relaxed=True) as conn:
                    row = lean.execute(conn, statement, params).one()
            row_id = row[0]
            if key is not None:
                setattr(request, KEY_STATE, (key, row[1]))
            setattr(request, _ROW, row_id)
            heartbeat_for(self.app).add(row_id)
        except Exception:
            logger.exception(
                "could not record the start of run %s",
                task_id,
                extra={"action": "run_record_failed", "task_id": task_id},
            )

    def failure(self, sender: Any = None, exception: BaseException | None = None, **_: Any) -> None:
        if exception is not None and self._mine(sender):
            setattr(sender.request, _ERROR, exception)

    def retry(self, sender: Any = None, reason: Any = None, **_: Any) -> None:
        if reason is not None and self._mine(sender):
            # Celery's Retry wraps the error that caused it.
            setattr(sender.request, _ERROR, getattr(reason, "exc", None) or reason)
            setattr(sender.request, _RETRY_IN, _seconds_until(getattr(reason, "when", None)))

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
        row_id = getattr(request, _ROW, None)
        if row_id is None:
            return
        heartbeat_for(self.app).discard(row_id)
        outcome = getattr(request, "gaffer_outcome", None) or {
            states.SUCCESS: "succeeded",
            states.RETRY: "retrying",
            states.REVOKED: "revoked",
        }.get(state or "", "failed")
        now = datetime.now(timezone.utc)
        started = getattr(request, _STARTED, None) or now
        values: dict[str, Any] = {
            "state": outcome,
            "finished_at": now,
            "duration": (now - started).total_seconds(),
        }
        if getattr(request, "gaffer_run_key", None) is not None:
            values["key"] = request.gaffer_run_key
        if getattr(request, "gaffer_run_fence", None) is not None:
            values["fence"] = request.gaffer_run_fence
        error = getattr(request, _ERROR, None)
        if error is not None and outcome in ("failed", "fence_lost", "retrying"):
            values["error_type"] = type(error).__name__[:255]
            values["error_message"] = str(error)[:ERROR_LENGTH]
        schedule = getattr(request, "gaffer_schedule", None)
        database = self.database
        # Leases the run left held: the statement that records its end frees them.
        held = left_held(request, database)
        try:
            with database.autocommit(relaxed=True) as conn:
                held = record_end(conn, database, values, row_id, held)
                if schedule:
                    nominal = parse_nominal(getattr(request, "gaffer_nominal_at", None))
                    update_schedule_facts(conn, database.models, schedule, outcome, nominal)
                confirm_after = database.settings.confirm_delivery_after
                fire = getattr(request, "gaffer_key", None)  # sent by the Gaffer scheduler
                if outcome == "retrying" and confirm_after is not None and fire:
                    # The retry is a new message, which the broker can lose like the
                    # first: check its fire again once the retry had time to start.
                    wait = (getattr(request, _RETRY_IN, None) or 0.0) + confirm_after
                    reopen(
                        conn,
                        database.models,
                        [task_id],
                        sent_at=now,
                        publish_after=now + timedelta(seconds=wait),
                    )
        except Exception:
            logger.exception(
                "could not record the end of run %s",
                task_id,
                extra={"action": "run_record_failed", "task_id": task_id},
            )
        finally:
            release_quietly(held)

    def revoked(
        self, sender: Any = None, request: Any = None, terminated: bool = False, **_: Any
    ) -> None:
        if request is None or not self._mine(sender):
            return
        now = datetime.now(timezone.utc)
        headers = getattr(request, "request_dict", None) or {}
        try:
            database = self.database
            table = table_of(database.models.JobRun)
            with database.begin() as conn:
                updated = conn.execute(
                    update(table)
                    .where(table.c.task_id == request.id, table.c.state == "running")
                    .values(state="revoked", finished_at=now, updated_at=db_now())
                ).rowcount
                if not updated:
                    conn.execute(
                        insert(table).values(
                            task_id=request.id,
                            task_name=sender.name,
                            schedule=headers.get("gaffer_schedule"),
                            nominal_at=parse_nominal(headers.get("gaffer_nominal_at")),
                            key=headers.get("gaffer_key"),
                            attempt=1,
                            state="revoked",
                            finished_at=now,
                            worker=getattr(request, "hostname", None),
                            updated_at=db_now(),
                        )
                    )
        except Exception:
            logger.exception(
                "could not record the revocation of run %s",
                getattr(request, "id", "?"),
                extra={"action": "run_record_failed"},
            )
