"""Fires made by hand: ``trigger`` (one now) and ``backfill`` (a past range).

Both go through the ledger like Beat's fires, so a backfill never repeats a fire that
was already sent, and both are published at once by the calling process.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Connection

from ..clock import Clock
from ..exceptions import InvalidInput, ScheduleNotFound
from ..protocol import FireKind, FireState
from ..schedules.bounds import Window
from ..schedules.kinds import Schedule
from ..schedules.preview import backfill_nominals
from ..store import Database
from ..store.fires import Fire, NewFire, insert_fires
from ..store.schedules import load_payloads
from .marking import publish

# A manual fire's nominal time is the second it was asked for; if a fire of that
# schedule already has that second, the next free one is taken (at most this many).
_TRIGGER_ATTEMPTS = 30


#: Called with the transaction and the fires inserted, before it commits (the audit log).
Recorded = Callable[[Connection, list[Fire]], None]


@dataclass(frozen=True, slots=True)
class BackfillReport:
    """``sent``: fires published now; ``already``: fires the ledger already had."""

    sent: int
    already: int


def trigger(
    app: Any, database: Database, name: str, clock: Clock, *, recorded: Recorded | None = None
) -> Fire:
    """Publish one fire of ``name`` now, with its own key (nominal time: now)."""
    now = clock()
    republish_at = now + timedelta(seconds=database.settings.republish_after)
    nominal = now.replace(microsecond=0)
    with database.begin() as conn:
        payloads = load_payloads(conn, database.models, [name])
        if name not in payloads:
            raise ScheduleNotFound(f"name: no usable schedule named {name!r}", field="name")
        if payloads[name].error is not None:
            raise InvalidInput(
                f"name: schedule {name!r} is in error: {payloads[name].error}", field="name"
            )
        inserted: list[Fire] = []
        for offset in range(_TRIGGER_ATTEMPTS):
            candidate = nominal + timedelta(seconds=offset)
            inserted = insert_fires(
                conn,
                database.models,
                [NewFire(name, candidate, FireKind.MANUAL, FireState.PENDING, republish_at, 1)],
                now,
            )
            if inserted:
                break
        if inserted and recorded is not None:
            recorded(conn, inserted)
    if not inserted:
        raise InvalidInput(
            f"name: {name!r} was triggered too often in the last seconds", field="name"
        )
    with app.producer_or_acquire() as producer:
        published = publish(app, database, inserted, payloads, producer, clock)
    _raise_refused(published.refused)
    return inserted[0]


def backfill(
    app: Any,
    database: Database,
    name: str,
    schedule: Schedule | Window,
    start: datetime,
    end: datetime,
    clock: Clock,
    *,
    limit: int = 10_000,
    recorded: Recorded | None = None,
) -> BackfillReport:
    """Publish every fire of ``name`` with ``start < nominal <= end`` not already in the ledger."""
    now = clock()
    nominals = backfill_nominals(schedule, start, end, now, limit=limit)
    republish_at = now + timedelta(seconds=database.settings.republish_after)
    fires = [
        NewFire(name, nominal, FireKind.BACKFILL, FireState.PENDING, republish_at, 1)
        for nominal in nominals
    ]
    with database.begin() as conn:
        payloads = load_payloads(conn, database.models, [name])
        inserted = insert_fires(conn, database.models, fires, now)
        if inserted and recorded is not None:
            recorded(conn, inserted)
    if inserted:
        with app.producer_or_acquire() as producer:
            published = publish(app, database, inserted, payloads, producer, clock)
        _raise_refused(published.refused)
    return BackfillReport(sent=len(inserted), already=len(nominals) - len(inserted))


def _raise_refused(refused: dict[str, str]) -> None:
    """A payload the broker's side refused (its fires stay pending): say so, naming why."""
    for name, reason in refused.items():
        raise InvalidInput(f"name: the fire of {name!r} could not be sent: {reason}", field="name")
