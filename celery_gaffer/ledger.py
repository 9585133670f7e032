"""The tick ledger: one row per fire, unique on ``(schedule, nominal_at)``.

These functions run inside a transaction the caller owns. The rule they keep: a fire is
inserted (or found already inserted) and the schedule's watermark advanced in the same
transaction; only a fire this caller inserted, or a pending fire it claimed, is
published by it, and a claim pushes ``publish_after`` forward so that no other Beat
publishes the same fire before ``gaffer_republish_after`` has passed.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Connection, Text, bindparam, func, select, type_coerce, update
from sqlalchemy.dialects import postgresql, sqlite

from .keys import fire_key, fire_task_id
from .store.bulk import matches, on_postgresql, unnest, unnest_select
from .store.models import Models, table_of

# Rows per statement when a list of ids or parameters is sent to the database.
CHUNK = 1000


@dataclass(frozen=True, slots=True)
class DueSchedule:
    """A schedule row whose ``next_fire_at`` has passed, as read by a tick."""

    id: int
    name: str
    task: str
    schedule: Any
    args: Any
    kwargs: Any
    options: Any
    catchup: str
    starting_deadline: float | None
    overlap: str
    watermark_at: datetime


@dataclass(frozen=True, slots=True)
class Fire:
    """A fire ready to publish."""

    id: int
    schedule: str
    nominal_at: datetime
    key: str
    task_id: str
    kind: str
    publish_count: int


@dataclass(frozen=True, slots=True)
class NewFire:
    """A fire to insert into the ledger."""

    schedule: str
    nominal_at: datetime
    kind: str
    state: str
    publish_after: datetime
    publish_count: int
    #: ``fire_key(schedule, nominal_at)``, when the caller has it already.
    key: str | None = None


def decode_json(value: Any) -> Any:
    """A JSON column read as raw text (SQLite) or already decoded (psycopg)."""
    if isinstance(value, (str, bytes, bytearray)):
        return json.loads(value)
    return value


def claim_due_schedules(
    conn: Connection, models: Models, now: datetime, limit: int
) -> list[DueSchedule]:
    """Lock and return up to ``limit`` schedules with ``next_fire_at <= now``, oldest first.

    On PostgreSQL rows another Beat has locked are skipped (``SKIP LOCKED``); on SQLite
    the caller's ``BEGIN IMMEDIATE`` already excludes every other writer. JSON columns
    are read as text so that one undecodable row cannot break the whole batch.
    """
    s = models.Schedule
    stmt = (
        select(
            s.id,
            s.name,
            s.task,
            type_coerce(s.schedule, Text),
            type_coerce(s.args, Text),
            type_coerce(s.kwargs, Text),
            type_coerce(s.options, Text),
            s.catchup,
            s.starting_deadline,
            s.overlap,
            s.watermark_at,
        )
        .where(s.next_fire_at <= now)
        .order_by(s.next_fire_at)
        .limit(limit)
    )
    if conn.dialect.name == "postgresql":
        stmt = stmt.with_for_update(skip_locked=True, of=table_of(s))
    return [DueSchedule(*row) for row in conn.execute(stmt)]


def advance_schedules(conn: Connection, models: Models, changes: Sequence[dict[str, Any]]) -> None:
    """Set ``watermark_at`` / ``next_fire_at`` (and ``error``) for many schedules at once.

    Each change is ``{"b_id", "watermark_at", "next_fire_at", "error"}``. On PostgreSQL
    one ``UPDATE ... FROM unnest(...)`` per chunk; elsewhere one executemany.
    """
    if not changes:
        return
    table = table_of(models.Schedule)
    if on_postgresql(conn):
        source = unnest(_ADVANCE_COLUMNS)
        stmt = (
            update(table)
            .where(table.c.id == source.c.id)
            .values(
                watermark_at=source.c.watermark_at,
                next_fire_at=source.c.next_fire_at,
                error=source.c.error,
            )
        )
        for start in range(0, len(changes), CHUNK):
            part = changes[start : start + CHUNK]
            conn.execute(
                stmt,
                {
                    "b_id": [c["b_id"] for c in part],
                    "b_watermark_at": [c["watermark_at"] for c in part],
                    "b_next_fire_at": [c["next_fire_at"] for c in part],
                    "b_error": [c["error"] for c in part],
                },
            )
        return
    stmt = (
        update(table)
        .where(table.c.id == bindparam("b_id"))
        .values(
            watermark_at=bindparam("watermark_at"),
            next_fire_at=bindparam("next_fire_at"),
            error=bindparam("error"),
        )
    )
    for start in range(0, len(changes), CHUNK):
        conn.execute(stmt, list(changes[start : start + CHUNK]))


_ADVANCE_COLUMNS = (
    ("id", "bigint"),
    ("watermark_at", "datetime"),
    ("next_fire_at", "datetime"),
    ("error", "text"),
)
_FIRE_COLUMNS = (
    ("schedule", "str"),
    ("nominal_at", "datetime"),
    ("key", "str"),
    ("task_id", "str"),
    ("kind", "str"),
    ("state", "str"),
    ("publish_after", "datetime"),
    ("publish_count", "int"),
    ("created_at", "datetime"),
)


def insert_fires(
    conn: Connection, models: Models, fires: Sequence[NewFire], now: datetime
) -> list[Fire]:
    """Insert fires; return the pending ones this call inserted (not a conflicting fire).

    The unique ``(schedule, nominal_at)`` constraint is what makes a double tick, or two
    Beats, harmless: the second insert of a fire does nothing and publishes nothing.
    """
    if not fires:
        return []
    table = table_of(models.Fire)
    rows: list[dict[str, Any]] = []
    for fire in fires:
        key = fire.key or fire_key(fire.schedule, fire.nominal_at)
        rows.append(
            {
                "schedule": fire.schedule,
                "nominal_at": fire.nominal_at,
                "key": key,
                "task_id": fire_task_id(key),
                "kind": fire.kind,
                "state": fire.state,
                "publish_after": fire.publish_after,
                "publish_count": fire.publish_count,
                "created_at": now,
            }
        )
    returning = (table.c.id, table.c.schedule, table.c.nominal_at)
    inserted: list[Fire] = []
    by_fire = {(row["schedule"], row["nominal_at"]): row for row in rows}
    for start in range(0, len(rows), CHUNK):
        part = rows[start : start + CHUNK]
        if on_postgresql(conn):
            names = [name for name, _ in _FIRE_COLUMNS]
            stmt = (
                postgresql.insert(table)
                .from_select(names, unnest_select(_FIRE_COLUMNS))
                .on_conflict_do_nothing()
                .returning(*returning)
            )
            arrays = {"b_" + name: [row[name] for row in part] for name in names}
            result = conn.execute(stmt, arrays)
        else:
            stmt = sqlite.insert(table).on_conflict_do_nothing().returning(*returning)
            result = conn.execute(stmt, part)
        for fire_id, schedule, nominal_at in result:
            row = by_fire[(schedule, nominal_at)]
            if row["state"] == "pending":
                inserted.append(
                    Fire(
                        fire_id,
                        schedule,
                        row["nominal_at"],
                        row["key"],
                        row["task_id"],
                        row["kind"],
                        row["publish_count"],
                    )
                )
    return inserted


def claim_pending(
    conn: Connection, models: Models, now: datetime, republish_after: float, limit: int
) -> list[Fire]:
    """Claim pending fires whose ``publish_after`` has passed, and push it forward.

    These are jittered fires whose send time has come, and fires whose publisher died
    between commit and publish (or between publish and marking them sent).
    """
    f = models.Fire
    claimed = lock_due_fires(conn, models, "pending", now, limit)
    if claimed:
        table = table_of(f)
        for start in range(0, len(claimed), CHUNK):
            ids = [fire.id for fire in claimed[start : start + CHUNK]]
            conn.execute(
                update(table)
                .where(matches(conn, table.c.id, ids, "bigint"))
                .values(
                    publish_after=now + timedelta(seconds=republish_after),
                    publish_count=table.c.publish_count + 1,
                )
            )
    return claimed


def lock_due_fires(
    conn: Connection, models: Models, state: str, now: datetime, limit: int
) -> list[Fire]:
    """Lock fires in ``state`` whose ``publish_after`` has passed (other Beats skip them).

    ``publish_count`` of the returned fires is the number of the send about to be made.
    """
    f = models.Fire
    stmt = (
        select(f.id, f.schedule, f.nominal_at, f.key, f.task_id, f.kind, f.publish_count)
        .where(f.state == state, f.publish_after <= now)
        .order_by(f.publish_after)
        .limit(limit)
    )
    if conn.dialect.name == "postgresql":
        stmt = stmt.with_for_update(skip_locked=True)
    return [
        Fire(
            row.id,
            row.schedule,
            row.nominal_at,
            row.key,
            row.task_id,
            row.kind,
            row.publish_count + 1,
        )
        for row in conn.execute(stmt)
    ]


def mark_sent(
    conn: Connection,
    models: Models,
    ids: Iterable[int],
    now: datetime,
    confirm_at: datetime | None = None,
) -> None:
    """Mark published fires ``sent`` (a fire not marked is republished later).

    With delivery confirmation on, ``publish_after`` becomes the time at which the fire
    must have a run record, or be published again.
    """
    table = table_of(models.Fire)
    id_list = list(ids)
    values: dict[str, Any] = {"state": "sent", "sent_at": now}
    if confirm_at is not None:
        values["publish_after"] = confirm_at
    for start in range(0, len(id_list), CHUNK):
        conn.execute(
            update(table)
            .where(
                matches(conn, table.c.id, id_list[start : start + CHUNK], "bigint"),
                table.c.state == "pending",
            )
            .values(**values)
        )


def mark_cancelled(conn: Connection, models: Models, ids: Iterable[int]) -> None:
    """A pending fire whose schedule was removed is never published."""
    table = table_of(models.Fire)
    id_list = list(ids)
    if id_list:
        conn.execute(
            update(table)
            .where(matches(conn, table.c.id, id_list, "bigint"))
            .values(state="cancelled")
        )


@dataclass(frozen=True, slots=True)
class Probe:
    """When each kind of Beat work is next due (None: never)."""

    next_fire_at: datetime | None
    check_at: datetime | None
    publish_after: datetime | None
    confirm_after: datetime | None

    def due(self, now: datetime) -> tuple[bool, bool, bool, bool]:
        """(fires, health checks, pending publishes, delivery confirmations) due now."""
        return tuple(  # type: ignore[return-value]
            when is not None and when <= now
            for when in (self.next_fire_at, self.check_at, self.publish_after, self.confirm_after)
        )

    def earliest(self) -> datetime | None:
        times = [
            t
            for t in (self.next_fire_at, self.check_at, self.publish_after, self.confirm_after)
            if t is not None
        ]
        return min(times) if times else None


def probe(conn: Connection, models: Models, *, confirm: bool) -> Probe:
    """One statement, all index lookups: when fires, checks and publishes are next due."""
    s, f = models.Schedule, models.Fire
    columns: list[Any] = [
        select(func.min(s.next_fire_at)).scalar_subquery(),
        select(func.min(s.check_at)).scalar_subquery(),
        select(func.min(f.publish_after)).where(f.state == "pending").scalar_subquery(),
    ]
    if confirm:
        columns.append(select(func.min(f.publish_after)).where(f.state == "sent").scalar_subquery())
    row = conn.execute(select(*columns)).one()
    return Probe(row[0], row[1], row[2], row[3] if confirm else None)


@dataclass(frozen=True, slots=True)
class Payload:
    """What a fire of a schedule sends: the task, its arguments and Celery options."""

    task: str
    args: list[Any]
    kwargs: dict[str, Any]
    options: dict[str, Any]
    overlap: str = "allow"


def load_payloads(conn: Connection, models: Models, names: Iterable[str]) -> dict[str, Payload]:
    """The payloads of the named schedules that exist and decode (others are left out)."""
    s = models.Schedule
    wanted = sorted(set(names))
    payloads: dict[str, Payload] = {}
    for start in range(0, len(wanted), CHUNK):
        stmt = select(
            s.name,
            s.task,
            type_coerce(s.args, Text),
            type_coerce(s.kwargs, Text),
            type_coerce(s.options, Text),
            s.overlap,
        ).where(matches(conn, s.name, wanted[start : start + CHUNK], "str"))
        for name, task, args, kwargs, options, overlap in conn.execute(stmt):
            try:
                payloads[name] = Payload(
                    task,
                    list(decode_json(args)),
                    dict(decode_json(kwargs)),
                    dict(decode_json(options)),
                    overlap,
                )
            except (TypeError, ValueError):
                continue
    return payloads
