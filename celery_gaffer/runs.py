"""Signal receivers that write one ``gaffer_job_runs`` row per delivery.

Connected by :func:`celery_gaffer.install` for one app (receivers check the sender's
app), with a ``dispatch_uid``. A row is written for every delivery of a GafferTask and of
a task sent by the Gaffer scheduler (its message carries ``gaffer_*`` headers): ``running``
at ``task_prerun``, then its final state at ``task_postrun`` (``succeeded``, ``failed``,
``retrying``, or the ``duplicate`` / ``skipped`` / ``fence_lost`` outcome the run set),
or ``revoked``. A failure to write a row is logged with the run's id and never breaks
the task.
"""

from __future__ import annotations

import logging
from datetime import datetime, timezone
from typing import Any

from celery import signals, states
from sqlalchemy import func, insert, select, update

from .store import Database, database_for
from .store.models import ERROR_LENGTH, table_of

logger = logging.getLogger("celery_gaffer.runs")

FINAL_STATES = (
    "succeeded",
    "failed",
    "retrying",
    "revoked",
    "skipped",
    "duplicate",
    "fence_lost",
    "missed",
    "lost",
)
_OUTCOME = "gaffer_outcome"
_ROW = "gaffer_run_row"
_STARTED = "gaffer_run_started"
_ERROR = "gaffer_run_error"


def connect(app: Any) -> None:
    """Connect the receivers for ``app`` (idempotent)."""
    uid = f"celery_gaffer.runs:{id(app)}"
    recorder = _Recorder(app)
    signals.task_prerun.connect(recorder.prerun, weak=False, dispatch_uid=uid + ":prerun")
    signals.task_postrun.connect(recorder.postrun, weak=False, dispatch_uid=uid + ":postrun")
    signals.task_failure.connect(recorder.failure, weak=False, dispatch_uid=uid + ":failure")
    signals.task_revoked.connect(recorder.revoked, weak=False, dispatch_uid=uid + ":revoked")


def _is_recorded(task: Any) -> bool:
    from .task import GafferTask

    if isinstance(task, GafferTask):
        return True
    return bool(getattr(task.request, "gaffer_schedule", None))


def _nominal(request: Any) -> datetime | None:
    value = getattr(request, "gaffer_nominal_at", None)
    if not value:
        return None
    try:
        return datetime.strptime(str(value), "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc)
    except ValueError:
        return None


class _Recorder:
    def __init__(self, app: Any) -> None:
        self.app = app

    @property
    def database(self) -> Database:
        return database_for(self.app)

    def _mine(self, task: Any) -> bool:
        return task is not None and getattr(task, "app", None) is self.app and _is_recorded(task)

    def prerun(
        self, sender: Any = None, task_id: str | None = None, task: Any = None, **_: Any
    ) -> None:
        task = task or sender
        if not self._mine(task) or task_id is None:
            return
        request = task.request
        now = datetime.now(timezone.utc)
        setattr(request, _STARTED, now)
        try:
            database = self.database
            table = table_of(database.models.JobRun)
            with database.begin() as conn:
                attempt = conn.execute(
                    select(func.count()).select_from(table).where(table.c.task_id == task_id)
                ).scalar_one()
                row_id = conn.execute(
                    insert(table)
                    .values(
                        task_id=task_id,
                        task_name=task.name,
                        schedule=getattr(request, "gaffer_schedule", None),
                        nominal_at=_nominal(request),
                        key=getattr(request, "gaffer_key", None),
                        attempt=int(attempt) + 1,
                        state="running",
                        started_at=now,
                        worker=request.hostname,
                        updated_at=now,
                    )
                    .returning(table.c.id)
                ).scalar_one()
            setattr(request, _ROW, row_id)
        except Exception:
            logger.exception(
                "could not record the start of run %s",
                task_id,
                extra={"action": "run_record_failed", "task_id": task_id},
            )

    def failure(
        self,
        sender: Any = None,
        task_id: str | None = None,
        exception: BaseException | None = None,
        **_: Any,
    ) -> None:
        if self._mine(sender) and exception is not None:
            setattr(sender.request, _ERROR, exception)

    def postrun(
        self,
        sender: Any = None,
        task_id: str | None = None,
        task: Any = None,
        state: str | None = None,
        **_: Any,
    ) -> None:
        task = task or sender
        if not self._mine(task) or task_id is None:
            return
        request = task.request
        row_id = getattr(request, _ROW, None)
        if row_id is None:
            return
        outcome = getattr(request, _OUTCOME, None)
        if outcome is None:
            outcome = {
                states.SUCCESS: "succeeded",
                states.RETRY: "retrying",
                states.REVOKED: "revoked",
            }.get(state or "", "failed")
        error = getattr(request, _ERROR, None)
        now = datetime.now(timezone.utc)
        started = getattr(request, _STARTED, None) or now
        values: dict[str, Any] = {
            "state": outcome,
            "finished_at": now,
            "duration": (now - started).total_seconds(),
            "updated_at": now,
        }
        if getattr(request, "gaffer_run_key", None) is not None:
            values["key"] = request.gaffer_run_key
        if getattr(request, "gaffer_run_fence", None) is not None:
            values["fence"] = request.gaffer_run_fence
        if error is not None and outcome in ("failed", "fence_lost", "retrying"):
            values["error_type"] = type(error).__name__[:255]
            values["error_message"] = str(error)[:ERROR_LENGTH]
        try:
            database = self.database
            table = table_of(database.models.JobRun)
            with database.begin() as conn:
                conn.execute(update(table).where(table.c.id == row_id).values(**values))
        except Exception:
            logger.exception(
                "could not record the end of run %s",
                task_id,
                extra={"action": "run_record_failed", "task_id": task_id},
            )

    def revoked(
        self, sender: Any = None, request: Any = None, terminated: bool = False, **_: Any
    ) -> None:
        task = sender
        if request is None or not self._mine(task):
            return
        now = datetime.now(timezone.utc)
        try:
            database = self.database
            table = table_of(database.models.JobRun)
            with database.begin() as conn:
                updated = conn.execute(
                    update(table)
                    .where(table.c.task_id == request.id, table.c.state == "running")
                    .values(state="revoked", finished_at=now, updated_at=now)
                ).rowcount
                if not updated:
                    headers = getattr(request, "request_dict", None) or {}
                    conn.execute(
                        insert(table).values(
                            task_id=request.id,
                            task_name=task.name,
                            schedule=headers.get("gaffer_schedule"),
                            nominal_at=None,
                            key=headers.get("gaffer_key"),
                            attempt=1,
                            state="revoked",
                            finished_at=now,
                            updated_at=now,
                        )
                    )
        except Exception:
            logger.exception(
                "could not record the revocation of run %s",
                getattr(request, "id", "?"),
                extra={"action": "run_record_failed"},
            )
