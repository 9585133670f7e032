"""The audit log (``{prefix}audit``): every change to a schedule, who made it and how.

An entry is written by :func:`record` inside the transaction of the change it
describes, so the log holds exactly the changes that were committed. Readers get the
newest first.
"""

from __future__ import annotations

import getpass
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, insert, select

from .models import Models, table_of

#: Through what a change was made (the entry's ``source``).
SOURCES = ("cli", "api", "console", "admin", "config", "import", "code", "beat")

#: Longest note kept (longer notes are cut, marked with "…").
NOTE_LENGTH = 2000


@dataclass(frozen=True, slots=True)
class Actor:
    """Who makes a change (``name``) and through what (``source``, one of :data:`SOURCES`)."""

    name: str
    source: str = "code"

    def __post_init__(self) -> None:
        if self.source not in SOURCES:
            raise ValueError(f"source: expected one of {', '.join(SOURCES)}")


@dataclass(frozen=True, slots=True)
class AuditEntry:
    """One change to a schedule, as the log keeps it; ``changes`` holds each changed field
    as ``[before, after]``."""

    id: int
    at: datetime
    actor: str
    source: str
    action: str
    schedule: str | None
    note: str | None
    #: Each changed field: ``{field: [before, after]}``.
    changes: dict[str, list[Any]]

    def as_json(self) -> dict[str, Any]:
        """``{"at", "actor", "source", "action", "schedule", "note", "changes"}``, ``at``
        as ISO 8601: what ``gaffer audit --json`` and the API give."""
        return {
            "at": self.at.isoformat(),
            "actor": self.actor,
            "source": self.source,
            "action": self.action,
            "schedule": self.schedule,
            "note": self.note,
            "changes": self.changes,
        }


def record(
    conn: Connection,
    models: Models,
    actor: Actor,
    action: str,
    schedule: str | None,
    at: datetime,
    *,
    note: str | None = None,
    changes: Mapping[str, Sequence[Any]] | None = None,
) -> None:
    """Write one entry in ``conn``'s transaction (the change's own)."""
    record_many(conn, models, actor, action, [(schedule, changes or {})], at, note=note)


def record_many(
    conn: Connection,
    models: Models,
    actor: Actor,
    action: str,
    entries: Sequence[tuple[str | None, Mapping[str, Sequence[Any]]]],
    at: datetime,
    *,
    note: str | None = None,
) -> None:
    """Write one entry per ``(schedule, changes)`` in one statement."""
    if not entries:
        return
    kept = _bounded(note)
    conn.execute(
        insert(table_of(models.Audit)),
        [
            {
                "at": at,
                "actor": actor.name[:255],
                "source": actor.source,
                "action": action,
                "schedule": schedule,
                "note": kept,
                "changes": {
                    field: [_plain(value) for value in pair] for field, pair in changes.items()
                },
            }
            for schedule, changes in entries
        ],
    )


def entries(
    conn: Connection,
    models: Models,
    *,
    schedule: str | None = None,
    since: datetime | None = None,
    before_id: int | None = None,
    limit: int = 100,
    actor: str | None = None,
    source: str | None = None,
) -> list[AuditEntry]:
    """Entries newest first: of ``schedule`` (all when None), at or after ``since``,
    with an id below ``before_id`` (the next page), made by ``actor`` through
    ``source`` (any when None), at most ``limit``."""
    table = table_of(models.Audit)
    stmt = select(table).order_by(table.c.id.desc()).limit(limit)
    if schedule is not None:
        stmt = stmt.where(table.c.schedule == schedule)
    if actor is not None:
        stmt = stmt.where(table.c.actor == actor)
    if source is not None:
        stmt = stmt.where(table.c.source == source)
    if since is not None:
        stmt = stmt.where(table.c.at >= since)
    if before_id is not None:
        stmt = stmt.where(table.c.id < before_id)
    return [
        AuditEntry(
            id=row.id,
            at=row.at,
            actor=row.actor,
            source=row.source,
            action=row.action,
            schedule=row.schedule,
            note=row.note,
            changes=dict(row.changes or {}),
        )
        for row in conn.execute(stmt)
    ]


def default_actor() -> str:
    """The OS user running this process (the CLI's and code's actor by default)."""
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "unknown"


def _plain(value: Any) -> Any:
    """A changed value as JSON holds it (times as ISO 8601 text)."""
    if isinstance(value, datetime):
        return value.isoformat()
    return value


def _bounded(note: str | None) -> str | None:
    if note is None or len(note) <= NOTE_LENGTH:
        return note
    return note[: NOTE_LENGTH - 1] + "…"
