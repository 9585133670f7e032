"""``GafferTask``: idempotent, fenced, bounded and observable Celery tasks.

.. code-block:: python

    @app.task(base=GafferTask, bind=True, gaffer_key="invoice.settled:{invoice_id}")
    def settle(self, invoice_id):
        with self.session() as s:
            s.get(Invoice, invoice_id).status = "settled"

Assume at-least-once delivery: a run may be delivered twice, twice at once, or again
after a worker died. The key is completed in the transaction of the run's writes, so
only one delivery's writes ever commit; a delivery that finds its key completed does
nothing and ends ``duplicate``.
"""

from __future__ import annotations

import inspect
import logging
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from celery import Task
from sqlalchemy import Connection
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session

from .exceptions import (
    AlreadyProcessed,
    DatabaseUnavailable,
    FenceLost,
    GafferError,
    InvalidInput,
    LeaseHeld,
    one_line,
)
from .fencing.batches import BatchReport, run_batches
from .fencing.context import RunContext, current_run, require_run
from .fencing.django_atomic import gaffer_alias, refuse_inside_sqlite_block, sealed_atomic
from .fencing.django_batches import run_django_batches
from .fencing.leases import Lease
from .fencing.overlap import Wanted
from .fencing.sessions import (
    fenced_sessions,
    forbid_unsealed_commits,
    listen_for_seals,
    run_info,
    seal_at_commit,
)
from .protocol import FireHeaders, KeyState, Overlap, RunState
from .runs.delivery import Delivery, DeliveryPolicy
from .runs.flower import announce, progress_fields
from .runs.overlap import ends_quietly
from .runs.recorder import records_end
from .schedules.spec import OVERLAP_POLICIES, check_key_template, validate_key
from .store import Database, database_for
from .store.keys import key_state

logger = logging.getLogger("celery_gaffer.task")

# How many times a delivery defers to a live holder of its own work before giving up.
DEFER_RETRIES = 1000

# Tasks whose unfenced key completion was already logged (once per task name).
_warned_unfenced: set[str] = set()

# The longest gap between two task-progress events of one run.
PROGRESS_INTERVAL = 1.0


class GafferTask(DeliveryPolicy, Task):  # type: ignore[misc]
    """Celery task base class: idempotency keys, fenced leases, resumable batches.

    Class attributes (also accepted as ``@app.task(...)`` options):

    * ``gaffer_key``: a ``str.format`` template over the bound arguments, e.g.
      ``"invoice.settled:{invoice_id}"`` (or override ``idempotency_key``).
    * ``gaffer_overlap``: ``"allow"`` (default), ``"forbid"`` (a run that finds another
      live run is recorded ``skipped``, or waits ``gaffer_overlap_wait`` seconds first)
      or ``"replace"`` (the new run takes the lease over; the old run's writes fail).
    """

    acks_late = True
    gaffer_key: str | None = None
    gaffer_overlap: str = Overlap.ALLOW
    gaffer_overlap_wait: float = 0.0
    #: Retries of a run that failed because the database could not be reached.
    gaffer_database_retries: int = 10

    # -- Celery's entry point ---------------------------------------------------------

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        request = self.request
        delivery = Delivery.of(request)
        result = self._deliver(request, delivery, args, kwargs)
        if delivery.outcome is not None and delivery.reason is not None:
            # A delivery that did no work, over: its leases are freed; now tell Flower.
            announce(self, delivery.outcome, delivery.reason, key=delivery.run_key)
        return result

    def _deliver(
        self, request: Any, delivery: Delivery, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        database = self._database()
        # The key and its state, read with the run record at task_prerun (if installed).
        known = delivery.key_state
        task_id = request.id or str(uuid.uuid4())
        # The overlap lease, from task_prerun's start record to the end record.
        overlap = delivery.overlap
        run = RunContext(
            database=database, task_id=task_id, owner=overlap.owner(request.hostname, task_id)
        )
        token = current_run.set(run)
        try:
            # Adopted first: whatever happens next, the end of the run frees it.
            overlap.adopt(run)
            run.key = known[0] if known is not None else self.gaffer_delivery_key(args, kwargs)
            if run.key is not None:
                if known is not None:
                    run.key_state = known[1]
                else:
                    with database.autocommit() as conn:
                        run.key_state = key_state(conn, database.models, run.key)
                if run.key_state == KeyState.COMPLETED:
                    return self._end_without_work(
                        run, RunState.DUPLICATE, f"key {run.key} was completed by an earlier run"
                    )
            wanted = Wanted.of(self.gaffer_overlap_lease())
            if wanted is not None:
                try:
                    overlap.hold(run, wanted, wait=self.gaffer_overlap_wait)
                except LeaseHeld:
                    return self._end_without_work(
                        run,
                        RunState.SKIPPED,
                        f"overlap={wanted.policy}: lease {wanted.name} is held by another live run",
                    )
            if request.called_directly:
                result = super().__call__(*args, **kwargs)
            else:
                # Traced by a worker, whose request is already pushed: the body runs as
                # Celery's tracer runs a task's ``run``. (``Task.__call__`` would push a
                # request of its own, which Celery 5.4 marks ``called_directly``, and
                # then ``self.retry()`` raises the error instead of retrying.)
                result = self.run(*args, **kwargs)
            if run.key is not None and run.key_state is None:
                self._complete_key_after_the_body(run)
            return result
        except AlreadyProcessed:
            return self._end_without_work(
                run,
                RunState.DUPLICATE,
                f"key {run.key} was completed by another run while this one ran;"
                " its writes were rolled back",
            )
        except FenceLost as exc:
            if request.called_directly or request.is_eager or not run.lost_to_a_crash():
                self._set_outcome(run, RunState.FENCE_LOST)
                if run.key is not None and len(exc.args) == 1:
                    exc.args = (f"{exc.args[0]} (key {run.key})",)  # for Flower and the record
                raise
            # The server crashed and lost the acquisition: nobody else has the work.
            raise self._retry_transient(exc) from exc
        except (DBAPIError, DatabaseUnavailable) as exc:
            if not _is_transient(exc) or request.called_directly or request.is_eager:
                raise
            raise self._retry_transient(exc) from exc
        finally:
            # Kept for the run record written at task_postrun.
            delivery.run_key = run.key
            delivery.run_fence = run.last_fence
            frees = self._end_record_frees(run, request, delivery, database)
            overlap.end_run(run, end_record_frees=frees)
            current_run.reset(token)

    # -- the API a task body uses -------------------------------------------------------

    def retry(self, *args: Any, **kwargs: Any) -> Any:
        """Celery's ``retry``, keeping the fire's ``gaffer_*`` headers on the new message."""
        fire_headers = FireHeaders.of(self.request).as_headers()
        if fire_headers:
            kwargs["headers"] = {**(kwargs.get("headers") or {}), **fire_headers}
        return super().retry(*args, **kwargs)

    def idempotency_key(self, *args: Any, **kwargs: Any) -> str | None:
        """The run's key from ``gaffer_key`` and the bound arguments (None: no key)."""
        template = self.gaffer_key
        if template is None:
            return None
        signature = self.__dict__.get("_gaffer_signature")
        if signature is None:
            check_key_template(template)
            signature = self.__dict__["_gaffer_signature"] = inspect.signature(self.run)
        try:
            bound = signature.bind(*args, **kwargs)
        except TypeError as exc:
            raise InvalidInput(
                f"gaffer_key: cannot bind arguments ({exc})", field="gaffer_key"
            ) from exc
        bound.apply_defaults()
        try:
            return template.format(**bound.arguments)
        except (KeyError, IndexError, AttributeError, ValueError) as exc:
            raise InvalidInput(
                f"gaffer_key: template {template!r} cannot be filled ({exc!r})", field="gaffer_key"
            ) from exc

    @contextmanager
    def session(self) -> Iterator[Session]:
        """A SQLAlchemy session on the Gaffer database, committed when the block ends.

        Its commit checks the fence of every lease the run holds and completes the
        run's key, in the same transaction as the block's writes: a stale fence rolls it
        back with ``FenceLost``, a key completed by another run with
        ``AlreadyProcessed`` (the run then ends ``duplicate``).
        """
        run = require_run()
        refuse_inside_sqlite_block("self.session()")
        session = fenced_sessions(run.database.engine)(info=run_info(run))
        try:
            yield session
            session.commit()
        except BaseException:
            session.rollback()
            raise
        finally:
            session.close()

    @contextmanager
    def connection(self) -> Iterator[Connection]:
        """A Core connection in a transaction, sealed like ``session`` on commit.

        The block's end commits it; a commit of the connection inside the block raises
        ``GafferError`` (it could not be sealed), and so does a block that ended the
        transaction itself (``conn.rollback()``).
        """
        run = require_run()
        refuse_inside_sqlite_block("self.connection()")
        listen_for_seals(run.database.engine)
        with run.database.engine.connect() as conn:
            forbid_unsealed_commits(conn)
            with conn.begin() as transaction:
                yield conn
                if not transaction.is_active:
                    raise GafferError(
                        "self.connection(): the block ended its transaction itself; its "
                        "commit is made, and sealed, when the block ends"
                    )
                claimed = seal_at_commit(conn, run, "complete")
            run.sealed("complete" if claimed else None)

    @contextmanager
    def atomic(self, using: str | None = None, *, savepoint: bool = True) -> Iterator[None]:
        """A Django transaction (``transaction.atomic``) on the Gaffer database's alias,
        sealed like ``session``: before the outermost block commits, on the same
        connection and in the same transaction as the ORM's writes, the fence of every
        lease the run holds is checked and the run's key completed. A stale fence rolls
        the block back with ``FenceLost``; a key completed by another run with
        ``AlreadyProcessed`` (the run then ends ``duplicate``).

        ``using``: the alias (default: the one of ``gaffer_database_url =
        "django://<alias>"``); it must be the Gaffer database. The block must be the
        outermost atomic block on it; ``transaction.atomic()`` blocks nest inside it as
        savepoints, and ``transaction.on_commit`` callbacks run after the sealed commit.
        """
        run = require_run()
        with sealed_atomic(run, gaffer_alias(self.app, using), savepoint=savepoint):
            yield

    @contextmanager
    def lease(self, name: str, ttl: float | None = None) -> Iterator[Lease]:
        """Hold the fenced lease ``name`` (renewed in the background) for the block.

        Raises ``LeaseHeld`` when another live holder has it. While held, every
        ``session`` commit of this run is fenced by it.
        """
        run = require_run()
        lease = self._take(run, name, ttl=ttl)
        try:
            yield lease
        finally:
            run.release(lease)

    def progress(self, **fields: Any) -> None:
        """Send a ``task-progress`` event: Flower shows the run as ``PROGRESS``, with the
        fields as its result (``processed 300, cursor 300, batches 3``) unless ``result``
        is one of them."""
        try:
            self.send_event("task-progress", **progress_fields(fields))
        except Exception as exc:  # noqa: BLE001 - progress never breaks the run
            logger.warning(
                "could not send task-progress: %s",
                one_line(exc),
                extra={"action": "progress_failed"},
            )

    def run_batches(
        self,
        cursor: str,
        fetch: Callable[..., Sequence[Any]],
        handle: Callable[..., Any],
        *,
        key: Callable[[Any], Any],
        batch_size: int = 500,
        deadline: float | None = None,
        orm: str = "sqlalchemy",
    ) -> BatchReport:
        """Process rows in bounded, fenced, resumable batches.

        ``fetch(session, after, limit)`` returns the next rows after the cursor value
        ``after`` (None at the start); ``handle(session, row)`` does one row's work;
        ``key(row)`` is the row's cursor value (JSON). Each batch is one transaction that
        also saves the cursor ``cursor``; no batch starts after ``deadline`` seconds
        (default: 80% of the soft time limit, if any).

        ``orm="django"``: each batch is a ``self.atomic()`` transaction instead, and the
        callables take no session: ``fetch(after, limit)`` and ``handle(row)``.
        """
        if batch_size < 1:
            raise InvalidInput("batch_size: must be at least 1", field="batch_size")
        if orm not in ("sqlalchemy", "django"):
            raise InvalidInput(f"orm: expected 'sqlalchemy' or 'django', got {orm!r}", field="orm")
        run = require_run()
        alias = gaffer_alias(self.app, None) if orm == "django" else None
        if deadline is None:
            deadline = self._default_deadline()
        name = f"batch:{cursor}"
        held = next((lease for lease in run.leases if lease.name == name), None)
        try:
            lease = held or self._take(run, name)
        except LeaseHeld as busy:
            if run.key is None:
                raise
            # Another delivery of the same work holds the batches. Do not drop this
            # message: if that holder dies, this delivery resumes from its cursor.
            raise self._retry_later(run.database) from busy
        last_progress = [0.0]

        def progress(**fields: Any) -> None:
            now = time.monotonic()
            if now - last_progress[0] >= PROGRESS_INTERVAL:
                last_progress[0] = now
                self.progress(**fields)

        try:
            if alias is None:
                report = run_batches(
                    run, cursor, fetch, handle, key,
                    batch_size=batch_size, deadline=deadline, progress=progress,
                )  # fmt: skip
            else:
                report = run_django_batches(
                    run, alias, cursor, fetch, handle, key,
                    batch_size=batch_size, deadline=deadline, progress=progress,
                )  # fmt: skip
        finally:
            if held is None:
                run.release(lease)
        self.progress(processed=report.processed, cursor=report.cursor, batches=report.batches)
        return report

    # -- internals --------------------------------------------------------------------

    def _database(self) -> Database:
        return database_for(self.app)

    def gaffer_delivery_key(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str | None:
        """The run's key: the fire's (a scheduled run), else ``idempotency_key``'s."""
        fire_key = Delivery.of(self.request).headers.key
        key = fire_key if fire_key else self.idempotency_key(*args, **kwargs)
        return None if key is None else validate_key(key)

    def gaffer_overlap_lease(self) -> tuple[str, str] | None:
        """``(lease name, policy)`` of the run's overlap lease: the schedule's policy (a
        scheduled run) before the task's ``gaffer_overlap``; None when runs may overlap."""
        headers = Delivery.of(self.request).headers
        schedule_policy = headers.overlap or Overlap.ALLOW
        if headers.schedule and schedule_policy != Overlap.ALLOW:
            return f"overlap:schedule:{headers.schedule}", schedule_policy
        policy = self.gaffer_overlap
        if policy not in OVERLAP_POLICIES:
            raise InvalidInput(
                f"gaffer_overlap: {policy!r} is not one of {OVERLAP_POLICIES}",
                field="gaffer_overlap",
            )
        if policy == Overlap.ALLOW:
            return None
        return f"overlap:task:{self.name}", policy

    def _take(self, run: RunContext, name: str, *, ttl: float | None = None) -> Lease:
        refuse_inside_sqlite_block(f"the lease {name!r}")
        return run.acquire(name, ttl if ttl is not None else run.database.settings.lease_ttl)

    def _end_record_frees(
        self, run: RunContext, request: Any, delivery: Delivery, database: Database
    ) -> bool:
        """Whether the statement that records the run's end (a moment from now) may free
        the leases the run still holds, rather than the run itself, now."""
        return (
            bool(run.leases)  # else nothing to free: spare the questions below
            and delivery.reason is None  # else Flower hears of its end before postrun
            and records_end(delivery, database)
            and ends_quietly(self, request)
        )

    def _retry_transient(self, exc: Exception) -> Any:
        # The database restarted or failed over: try the whole run again later. The key
        # and the fences make the repeat safe.
        retries = self.request.retries or 0
        return self.retry(
            exc=exc, countdown=min(2.0**retries, 30.0), max_retries=self.gaffer_database_retries
        )

    def _retry_later(self, database: Database) -> Any:
        # Not max_retries=None: Celery reads that as "the task's default" (3). The live
        # holder finishes or its lease expires within a TTL, so this ends.
        return self.retry(countdown=database.settings.lease_ttl, max_retries=DEFER_RETRIES)

    def _default_deadline(self) -> float | None:
        soft = None
        limits = getattr(self.request, "timelimit", None)
        if limits and limits[1]:
            soft = limits[1]
        soft = soft or self.soft_time_limit or self.app.conf.task_soft_time_limit
        return 0.8 * float(soft) if soft else None

    def _complete_key_after_the_body(self, run: RunContext) -> None:
        """Complete the key of a run whose body succeeded without a fenced commit (it
        never opened ``self.session()`` / ``self.connection()``): later deliveries are
        then duplicates. Not atomic with the body's effects, as a fenced commit is: the
        first such run of each task says so, once."""
        if self.name not in _warned_unfenced:
            _warned_unfenced.add(self.name)
            logger.warning(
                "%s has a key but its run wrote nothing through self.session(), "
                "self.connection() or self.atomic(): its key is completed after the body, "
                "not atomically with its effects (see docs/how-to/idempotent-tasks.md)",
                self.name,
                extra={"action": "key_unfenced", "task": self.name},
            )
        try:
            listen_for_seals(run.database.engine)
            with run.database.begin() as conn:
                seal_at_commit(conn, run, "complete")
            run.sealed("complete")
        except AlreadyProcessed:
            # Another delivery completed the key while this body ran: both did the work.
            logger.warning(
                "%s[%s]: key %s was completed by another run while this one ran",
                self.name,
                run.task_id,
                run.key,
                extra={"action": "key_completed_twice", "key": run.key},
            )
        except (DBAPIError, DatabaseUnavailable) as exc:
            # The body succeeded: retrying the run would do its work again. A later
            # delivery of the same key will find it unclaimed and run once more.
            logger.warning(
                "%s[%s]: could not complete key %s after the body: %s",
                self.name,
                run.task_id,
                run.key,
                one_line(exc),
                extra={"action": "key_completion_failed", "key": run.key},
            )

    def _set_outcome(self, run: RunContext, outcome: RunState) -> None:
        run.outcome = outcome
        Delivery.of(self.request).outcome = outcome

    def _end_without_work(self, run: RunContext, outcome: RunState, reason: str) -> None:
        """End a delivery that did no work (``duplicate``, ``skipped``), with why: for the
        run record, the worker log and, once the delivery is over, Flower."""
        self._set_outcome(run, outcome)
        Delivery.of(self.request).reason = reason
        logger.info(
            "%s[%s] ended %s: %s",
            self.name,
            run.task_id,
            outcome,
            reason,
            extra={"action": f"run_{outcome}", "task_id": run.task_id, "key": run.key},
        )
        return None


def _is_transient(exc: Exception) -> bool:
    """A lost or refused connection, as opposed to an error in the task's own SQL."""
    if isinstance(exc, DatabaseUnavailable):
        return True
    if isinstance(exc, DBAPIError) and exc.connection_invalidated:
        return True
    text = str(getattr(exc, "orig", exc)).lower()
    return any(
        marker in text
        for marker in ("connection", "server closed", "terminating", "shutting down", "starting up")
    )


def current_gaffer_run() -> RunContext | None:
    """The run context of the Gaffer task running in this thread, if any."""
    return current_run.get()


__all__ = ["BatchReport", "GafferError", "GafferTask", "current_gaffer_run"]
