"""Every schedule's state word, as ``gaffer status`` prints it and the console lists its
alerts: one statement whatever the number of schedules, streamed.

The rules are Beat's (:func:`.health.evaluate`). ``error`` and ``paused`` come from the
row; ``ok`` from the health word Beat stores, which holds until the row's ``check_at``
(the next fire's grace expiry, or at once after a run ends or the row changes). Any
other row (stored ``late`` or ``failing``, or a stale word) is evaluated live, with the
ledger's newest due fire that the same statement looked up
(:func:`celery_gaffer.store.schedule_health.survey_rows`), so no row costs a query of
its own. A schedule's definition is parsed once per distinct text, since tenants'
schedules share a few timings. ``gaffer status`` reads the same survey through
:func:`states`: rows as tuples, one health shared by the rows that decide alike, read
on a thread a few batches ahead (:class:`Prefetched`).
"""

from __future__ import annotations

import contextlib
import functools
import queue
import threading
from collections.abc import Generator, Iterator, Mapping, Sequence
from datetime import datetime, tzinfo
from typing import Any

from sqlalchemy import Connection

from ..protocol import Health as State
from ..schedules.display import when, zone_of
from ..schedules.kinds import Schedule, schedule_from_dict
from ..settings import GafferSettings
from ..store import calendars, schedule_health
from ..store.models import Models
from ..store.schedule_rows import decode_json
from .health import Calendars, Health, evaluate_safely

#: The states that alert (``gaffer status`` exits 1; the console's alerts page).
ALERTING = (State.LATE, State.FAILING, State.ERROR)


def survey(
    conn: Connection,
    models: Models,
    now: datetime,
    settings: GafferSettings,
    *,
    alerts_only: bool = False,
    every_column: bool = False,
    batch: int = schedule_health.SURVEY_BATCH,
) -> Generator[tuple[Mapping[Any, Any], Health], None, None]:
    """Each schedule's row and its :class:`~.health.Health` at ``now``, by name.

    ``alerts_only``: only the late, failing and in-error ones (the database leaves out
    the rows that cannot be). ``every_column``: rows carry every column (for
    :func:`~celery_gaffer.store.schedule_rows.stored`). A single statement, streamed
    ``batch`` rows at a time: stop iterating whenever enough was seen.
    """
    rows = schedule_health.survey_rows(
        conn,
        models,
        now,
        settings.default_grace,
        alert_candidates=alerts_only,
        every_column=every_column,
        batch=batch,
    )
    evaluations = Evaluations(conn, models, now, settings)
    try:
        for row in rows:
            health = health_of(row, evaluations)
            if not alerts_only or health.state in ALERTING:
                yield row, health
    finally:
        rows.close()  # the cursor, before the caller's transaction ends


#: Where a row of :func:`states` has the schedule's name, last success time and
#: definition (JSON text).
NAME, LAST_SUCCESS_AT, SCHEDULE = (
    schedule_health.SURVEY_COLUMNS.index(column)
    for column in ("name", "last_success_at", "schedule")
)
_STORED_OK = schedule_health.SURVEY_COLUMNS.index("stored_ok")


def states(
    conn: Connection, models: Models, now: datetime, settings: GafferSettings
) -> Generator[tuple[Sequence[Any], Health], None, None]:
    """:func:`survey` for ``gaffer status``, the same rules at less cost a row: each
    schedule's row (a tuple: see :data:`NAME`, :data:`LAST_SUCCESS_AT`,
    :data:`SCHEDULE`) and a :class:`~.health.Health` that rows deciding alike share:
    its state and facts are the row's, its ``schedule`` and ``last_success_at`` are
    not (read them from the row).
    """
    # Read before the rows' thread starts: it alone uses the connection from then on.
    stored = calendars.load_calendars(conn, models)
    rows = schedule_health.survey_rows(conn, models, now, settings.default_grace, as_tuples=True)
    evaluations = Evaluations(conn, models, now, settings, lambda: stored)
    held: dict[tuple[Any, ...], Health] = {}
    fetched = Prefetched(rows)
    try:
        for row in fetched:
            if row[_STORED_OK] and parsed(row[SCHEDULE]) is not None:
                # What an ok line shows beyond the name and last success.
                facts = (row[_NEXT_FIRE_AT], row[_FAILURES], row[_SUCCESS_NOMINAL_AT])
                health = held.get(facts)
                if health is None:
                    if len(held) >= Evaluations.LIMIT:
                        held.clear()
                    health = held[facts] = _stored_ok(schedule_health.in_utc(row))
                yield row, health
            else:
                yield row, evaluations.shared(row)
    finally:
        fetched.stop()
        rows.close()  # the cursor, before the caller's transaction ends


class Prefetched:
    """``rows`` read by a thread of their own, a batch ahead of their consumer: the
    database computes the next batch (its ledger lookups) while this one is evaluated
    and printed. Only that thread touches the rows' connection until :meth:`stop`, and
    the rules read no other row: the evaluations never query (each row carries its
    ``ledger_latest``; the stored calendars are read before)."""

    #: Rows handed over at once, and batches read ahead (memory stays bounded).
    BATCH, AHEAD = 1000, 4

    def __init__(self, rows: Iterator[Any]) -> None:
        self._rows = rows
        self._batches: queue.Queue[list[Any] | BaseException | None] = queue.Queue(self.AHEAD)
        self._stopping = threading.Event()
        self._reader = threading.Thread(target=self._read, name="gaffer-survey", daemon=True)
        self._started = False

    def __iter__(self) -> Iterator[Any]:
        if not self._started:
            self._started = True
            self._reader.start()
        while True:
            batch = self._batches.get()
            if batch is None:
                return
            if isinstance(batch, BaseException):
                raise batch
            yield from batch

    def _read(self) -> None:
        batch: list[Any] = []
        end: BaseException | None = None
        try:
            for row in self._rows:
                batch.append(row)
                if len(batch) >= self.BATCH:
                    self._batches.put(batch)
                    batch = []
                    if self._stopping.is_set():
                        return
        except BaseException as exc:  # noqa: BLE001 - raised again in the consumer
            end = exc
        if batch:  # the rows before an error too
            self._batches.put(batch)
        self._batches.put(end)

    def stop(self) -> None:
        """End the reading thread (the consumer stopped early, or is done)."""
        self._stopping.set()
        if not self._started:
            return
        while self._reader.is_alive():
            # Make room for a batch it may be waiting to hand over.
            with contextlib.suppress(queue.Empty):
                self._batches.get(timeout=0.05)
        self._reader.join()


_NEXT_FIRE_AT, _FAILURES, _SUCCESS_NOMINAL_AT = (
    schedule_health.SURVEY_COLUMNS.index(column)
    for column in ("next_fire_at", "consecutive_failures", "last_success_nominal_at")
)


def _stored_ok(row: Sequence[Any]) -> Health:
    return Health(
        schedule=row[NAME],
        state=State.OK,
        due_nominal_at=None,
        last_success_at=row[LAST_SUCCESS_AT],
        last_success_nominal_at=row[_SUCCESS_NOMINAL_AT],
        next_fire_at=row[_NEXT_FIRE_AT],
        consecutive_failures=int(row[_FAILURES] or 0),
    )


def health_of(row: Mapping[Any, Any], evaluations: Evaluations) -> Health:
    """The health of one row of :func:`~celery_gaffer.store.schedule_health.survey_rows`:
    ``ok`` when its stored word holds, else Beat's evaluation."""
    if row["stored_ok"] and parsed(row["schedule"]) is not None:
        return Health(
            schedule=row["name"],
            state=State.OK,
            due_nominal_at=None,
            last_success_at=row["last_success_at"],
            last_success_nominal_at=row["last_success_nominal_at"],
            next_fire_at=row["next_fire_at"],
            consecutive_failures=int(row["consecutive_failures"] or 0),
        )
    return evaluations.of(row)


class Evaluations:
    """Beat's evaluation of survey rows at one instant, each distinct one made once.

    Tenants' schedules share a few timings, and Beat decides a timing's fires for all of
    them alike, so rows differ mostly by name and last success time, which the rules do
    not read (a schedule is late by its last success's *nominal* time): the rest of the
    row (a survey row starts with those two) is the key, and a cron schedule's maths
    runs once per timing, not once a row.
    """

    #: Distinct evaluations kept (the memo starts again when full).
    LIMIT = 10_000

    def __init__(
        self,
        conn: Connection,
        models: Models,
        now: datetime,
        settings: GafferSettings,
        stored: Calendars | None = None,
    ) -> None:
        self._conn, self._models, self._now, self._settings = conn, models, now, settings
        self._made: dict[Any, Health] = {}
        # The stored calendars (``stored``, else read once when a row first names one).
        self._calendars = stored or calendars.loader(conn, models)

    def of(self, row: Mapping[Any, Any]) -> Health:
        """The row's own health (its name and last success time)."""
        made = self._made_for(tuple(row.values()), row)
        return Health(
            schedule=row["name"],
            state=made.state,
            due_nominal_at=made.due_nominal_at,
            last_success_at=row["last_success_at"],
            last_success_nominal_at=made.last_success_nominal_at,
            next_fire_at=made.next_fire_at,
            consecutive_failures=made.consecutive_failures,
            error=made.error,
        )

    def shared(self, row: Sequence[Any]) -> Health:
        """The health of a row of :data:`~celery_gaffer.store.schedule_health.SURVEY_COLUMNS`
        as made for the first row deciding alike (whose name and last success it has)."""
        return self._made_for(row, None)

    def _made_for(self, values: Sequence[Any], row: Mapping[Any, Any] | None) -> Health:
        key: Any = values[_PER_ROW:]
        try:
            made = self._made.get(key)
        except TypeError:  # a value the driver decoded into a list or dict: no memo
            key, made = None, None
        if made is None:
            if row is None:  # a tuple survey row: its instants as the driver gave them
                utc = schedule_health.in_utc(values)
                row = dict(zip(schedule_health.SURVEY_COLUMNS, utc, strict=True))
            made = self._evaluate(row)
            if key is not None:
                if len(self._made) >= self.LIMIT:
                    self._made.clear()
                self._made[key] = made
        return made

    def _evaluate(self, row: Mapping[Any, Any]) -> Health:
        conn, models, now, settings = self._conn, self._models, self._now, self._settings
        latest = row["ledger_latest"]
        return evaluate_safely(conn, models, row, now, settings, latest, self._calendars)[0]


# A survey row's facts a status line shows that the rules never read, first in the row.
_PER_ROW = len(("name", "last_success_at"))


def parsed(text: Any) -> Schedule | None:
    """The schedule a row's definition describes, or None when it cannot be read (the
    evaluation then reports why)."""
    if isinstance(text, str) and len(text) <= _CACHED_TEXT:
        return _parsed(text)
    return _parse(text)


# Definitions longer than any a schedule writes are not kept (a hand-edited row).
_CACHED_TEXT = 1024


@functools.lru_cache(maxsize=4096)
def _parsed(text: str) -> Schedule | None:
    # Pure: a memo shared by every survey of the process.
    return _parse(text)


def _parse(text: Any) -> Schedule | None:
    try:
        return schedule_from_dict(decode_json(text, "schedule"))
    except (ValueError, TypeError, RecursionError):
        return None


def zone_shown(text: Any) -> tzinfo | None:
    """The zone a schedule's times are shown in (None: UTC), from its stored definition."""
    schedule = parsed(text)
    return None if schedule is None else zone_of(schedule)


def reason(health: Health, zone: tzinfo | None) -> str:
    """Why a schedule is in its state, on one line, the late fire shown in ``zone``."""
    if health.state == State.LATE and health.due_nominal_at is not None:
        return f"the fire of {when(health.due_nominal_at, zone)} has not succeeded"
    return " ".join(health.reason.split())
