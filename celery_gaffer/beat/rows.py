"""The due rows a tick decides: each checked with the rules every entry passes before
it is written (cached), and the errors of the rows that cannot be used, reported once.
Each move of a row into ``error`` or out of it is written to the audit log (actor and
source ``beat``) in the transaction that makes it.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Connection

from ..exceptions import GafferError
from ..schedules.spec import ScheduleSpec
from ..store import audit
from ..store.models import Models
from ..store.schedules import DueSchedule, Payload
from .plan import stored_entry, usable_row

logger = logging.getLogger("celery_gaffer.scheduler")

# Parsed schedules and payloads kept between ticks (the due ones of a busy tick fit).
PARSED_CACHE = 2_000
# How soon Beat loads a schedule in error again, to see whether its cause is gone.
ERROR_RECHECK = timedelta(seconds=60)
#: Who the audit log names for Beat's own changes.
BEAT = audit.Actor("beat", "beat")


@dataclass(frozen=True, slots=True)
class ErrorMove:
    """A schedule's ``error`` going from ``before`` to ``after`` (None: not in error)."""

    schedule: str
    before: str | None
    after: str | None


def record_moves(conn: Connection, models: Models, moves: list[ErrorMove], now: datetime) -> None:
    """Write the audit entries of ``moves`` in ``conn``'s transaction (the moves' own):
    ``error`` with the reason as its note, or ``recover``."""
    for move in moves:
        action = "recover" if move.after is None else "error"
        changes = {"error": [move.before, move.after]}
        audit.record(
            conn, models, BEAT, action, move.schedule, now, note=move.after, changes=changes
        )


@dataclass
class RowChecks:
    """The checked rows of one Beat, by row and by stored text, and the errors it logged."""

    _parsed: dict[tuple[Any, ...], tuple[ScheduleSpec, Payload]] = field(default_factory=dict)
    #: Parsed schedules and validated payloads by their stored text (:func:`.usable_row`).
    _parts: dict[tuple[Any, ...], Any] = field(default_factory=dict)
    _reported: set[tuple[str, str]] = field(default_factory=set)

    def usable(self, row: DueSchedule, tasks: Mapping[str, Any]) -> tuple[ScheduleSpec, Payload]:
        """The validated entry and payload of a row, or an error saying why it is unusable.

        Rows are checked with the same rules as ``ScheduleStore`` (a row written by hand
        or by another version may break them), and the task must be registered with
        this Beat's app. Cached by the row's id and raw column values, so an edited row
        is checked again and an unchanged one is not.
        """
        if row.task not in tasks:
            raise GafferError(f"task: {row.task!r} is not registered with this Beat's app")
        cache_key = (row.id, str(row.schedule), *stored_entry(row))
        usable = self._parsed.get(cache_key)
        if usable is None:
            usable = usable_row(row, self._parts)
            if len(self._parsed) >= PARSED_CACHE:
                self._parsed.clear()
            self._parsed[cache_key] = usable
        return usable

    def error_change(self, row: DueSchedule, exc: Exception, now: datetime) -> dict[str, Any]:
        message = (str(exc) or type(exc).__name__).splitlines()[0][:2000]
        if not isinstance(exc, GafferError):
            message = f"{type(exc).__name__}: {message}"
        self.report_error(row.name, message)
        return {
            "id": row.id,
            "watermark_at": row.watermark_at,
            # Loaded again then: the error clears once its cause is gone.
            "next_fire_at": now + ERROR_RECHECK,
            "error": message,
            "sent": 0,
        }

    def report_error(self, name: str, message: str) -> None:
        if (name, message) not in self._reported:
            self._reported.add((name, message))
            logger.error(
                "schedule %s cannot be used and is marked in error: %s",
                name,
                message,
                extra={"action": "schedule_error", "schedule": name},
            )

    def note_recovery(self, row: DueSchedule) -> None:
        if row.error is None:
            return
        self._reported = {(n, m) for n, m in self._reported if n != row.name}
        logger.warning(
            "schedule %s is usable again (was in error: %s)",
            row.name,
            row.error,
            extra={"action": "schedule_recovered", "schedule": row.name},
        )
