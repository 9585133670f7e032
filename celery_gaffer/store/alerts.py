"""The alert outbox (``{prefix}alerts``): health-change webhooks, sent at least once.

An alert is inserted in the transaction that stores the health change it reports, so a
change is alerted exactly when it is committed, whichever Beat commits it. Sending is
claimed one alert at a time: the claim pushes ``next_attempt_at`` past the send's
timeout, so another Beat (or this one after a crash) tries it only if the send never
finished.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Connection, insert, or_, select, update

from .arrays import on_postgresql
from .models import Models, table_of


@dataclass(frozen=True, slots=True)
class Alert:
    id: int
    schedule: str
    body: dict[str, Any]
    attempts: int
    created_at: datetime
    #: Why the previous attempt failed (None: the first attempt, or it was not recorded).
    last_error: str | None = None


def add_alert(
    conn: Connection, models: Models, schedule: str, body: dict[str, Any], now: datetime
) -> int:
    """Insert an unsent alert, due at once; its id."""
    table = table_of(models.Alert)
    result = conn.execute(
        insert(table)
        .values(schedule=schedule, body=body, attempts=0, next_attempt_at=now, created_at=now)
        .returning(table.c.id)
    )
    return int(result.scalar_one())


def claim_alert(conn: Connection, models: Models, now: datetime, hold: timedelta) -> Alert | None:
    """The oldest due unsent alert, counted as one more attempt and held from other
    Beats for ``hold``; None when none is due."""
    table = table_of(models.Alert)
    stmt = (
        select(
            table.c.id,
            table.c.schedule,
            table.c.body,
            table.c.attempts,
            table.c.created_at,
            table.c.last_error,
        )
        .where(table.c.next_attempt_at <= now)
        .order_by(table.c.next_attempt_at, table.c.id)
        .limit(1)
    )
    if on_postgresql(conn):
        stmt = stmt.with_for_update(skip_locked=True)
    row = conn.execute(stmt).first()
    if row is None:
        return None
    attempts = int(row.attempts) + 1
    conn.execute(
        update(table)
        .where(table.c.id == row.id)
        .values(attempts=attempts, next_attempt_at=now + hold)
    )
    return Alert(
        int(row.id), row.schedule, dict(row.body), attempts, row.created_at, row.last_error
    )


def mark_sent(conn: Connection, models: Models, alert_id: int, now: datetime) -> None:
    table = table_of(models.Alert)
    conn.execute(
        update(table)
        .where(table.c.id == alert_id)
        .values(sent_at=now, next_attempt_at=None, last_error=None)
    )


def mark_failed(
    conn: Connection, models: Models, alert_id: int, error: str, retry_at: datetime | None
) -> None:
    """Record a failed attempt: retried at ``retry_at``, or never again when None."""
    table = table_of(models.Alert)
    conn.execute(
        update(table)
        .where(table.c.id == alert_id)
        .values(last_error=error[:2000], next_attempt_at=retry_at)
    )


def expired_conditions(models: Models, before: datetime) -> tuple[Any, ...]:
    """What :mod:`.retention` deletes: alerts sent, or given up, before ``before``."""
    table = table_of(models.Alert)
    return (
        table.c.next_attempt_at.is_(None),
        or_(table.c.sent_at < before, table.c.sent_at.is_(None) & (table.c.created_at < before)),
    )


def alert_rows(conn: Connection, models: Models) -> list[dict[str, Any]]:
    """Every alert, oldest first (tests and inspection)."""
    table = table_of(models.Alert)
    return [dict(row) for row in conn.execute(select(table).order_by(table.c.id)).mappings()]


def next_attempt(conn: Connection, models: Models) -> datetime | None:
    """When the earliest unsent alert is next due (None: none is waiting)."""
    table = table_of(models.Alert)
    stmt = (
        select(table.c.next_attempt_at)
        .where(table.c.next_attempt_at.is_not(None))
        .order_by(table.c.next_attempt_at)
        .limit(1)
    )
    found: datetime | None = conn.execute(stmt).scalar()
    return found
