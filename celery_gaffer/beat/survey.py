"""Every schedule's state word, as ``gaffer status`` prints it and the console lists its
alerts: one statement whatever the number of schedules, streamed.

The rules are Beat's (:func:`.health.evaluate`). ``error`` and ``paused`` come from the
row; ``ok`` from the health word Beat stores, which holds until the row's ``check_at``
(the next fire's grace expiry, or at once after a run ends or the row changes). Any
other row (stored ``late`` or ``failing``, or a stale word) is evaluated live, with the
ledger's newest due fire that the same statement looked up
(:func:`celery_gaffer.store.schedule_health.survey_rows`), so no row costs a query of
its own. A schedule's definition is parsed once per distinct text, since tenants'
schedules share a few timings.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Generator, Mapping
from datetime import datetime, tzinfo
from operator import itemgetter
from typing import Any

from sqlalchemy import Connection

from ..protocol import Health as State
from ..schedules.display import when, zone_of
from ..schedules.kinds import Schedule, schedule_from_dict
from ..settings import GafferSettings
from ..store import schedule_health
from ..store.models import Models
from ..store.schedule_rows import decode_json
from .health import Health, evaluate_safely

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
) -> Generator[tuple[Mapping[Any, Any], Health], None, None]:
    """Each schedule's row and its :class:`~.health.Health` at ``now``, by name.

    ``alerts_only``: only the late, failing and in-error ones (the database leaves out
    the rows that cannot be). ``every_column``: rows carry every column (for
    :func:`~celery_gaffer.store.schedule_rows.stored`). A single statement, streamed:
    stop iterating whenever enough was seen.
    """
    rows = schedule_health.survey_rows(
        conn,
        models,
        now,
        settings.default_grace,
        alert_candidates=alerts_only,
        every_column=every_column,
    )
    evaluations = Evaluations(conn, models, now, settings)
    try:
        for row in rows:
            health = health_of(row, evaluations)
            if not alerts_only or health.state in ALERTING:
                yield row, health
    finally:
        rows.close()  # the cursor, before the caller's transaction ends


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
    row is the key, and a cron schedule's maths runs once per timing, not once a row.
    """

    #: Distinct evaluations kept (the memo starts again when full).
    LIMIT = 10_000

    def __init__(
        self, conn: Connection, models: Models, now: datetime, settings: GafferSettings
    ) -> None:
        self._conn, self._models, self._now, self._settings = conn, models, now, settings
        self._made: dict[Any, Health] = {}
        self._key: Callable[[tuple[Any, ...]], Any] | None = None

    def of(self, row: Mapping[Any, Any]) -> Health:
        if self._key is None:  # every row of a survey has the same columns
            kept = [i for i, name in enumerate(row.keys()) if name not in _NOT_READ]
            self._key = itemgetter(*kept)
        key = self._key(tuple(row.values()))
        try:
            made = self._made.get(key)
        except TypeError:  # a value the driver decoded into a list or dict: no memo
            key, made = None, None
        if made is None:
            made = evaluate_safely(
                self._conn, self._models, row, self._now, self._settings, row["ledger_latest"]
            )[0]
            if key is not None:
                if len(self._made) >= self.LIMIT:
                    self._made.clear()
                self._made[key] = made
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


# Facts a status line shows that the rules never read.
_NOT_READ = frozenset(("name", "last_success_at"))


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
