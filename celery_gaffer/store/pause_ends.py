"""The paused schedules whose ``paused_until`` has passed (Beat resumes them).

Beat's stand-in until ``ScheduleStore.resume_due`` finds and locks these rows itself
(merged with ScheduleStore.resume_due: this module then goes).
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import Connection, select

from .models import Models, table_of


def pauses_ended(conn: Connection, models: Models, now: datetime, limit: int) -> list[str]:
    """Names of up to ``limit`` paused schedules whose ``paused_until`` is at or before
    ``now``, earliest first (through the ``paused_until`` index)."""
    table = table_of(models.Schedule)
    stmt = (
        select(table.c.name)
        .where(table.c.paused_until <= now, table.c.enabled.is_(False))
        .order_by(table.c.paused_until)
        .limit(limit)
    )
    return list(conn.execute(stmt).scalars())
