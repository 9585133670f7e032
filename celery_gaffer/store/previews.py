"""Reads for previews (``ScheduleStore.preview_*``): what the ledger already has."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import Connection, select

from .models import Models


def ledger_nominals(
    conn: Connection, models: Models, schedule: str, after: datetime, until: datetime
) -> set[datetime]:
    """The nominal times ``n`` with ``after < n <= until`` that the ledger has for
    ``schedule``, whatever their state (by the unique ``(schedule, nominal_at)`` index)."""
    fires = models.Fire
    stmt = select(fires.nominal_at).where(
        fires.schedule == schedule, fires.nominal_at > after, fires.nominal_at <= until
    )
    return set(conn.execute(stmt).scalars())
