"""The tick ledger: one row per fire, unique on ``(schedule, nominal_at)``.

These functions run inside a transaction the caller owns. The rule they keep: a fire is
inserted (or found already inserted) and the schedule's watermark advanced in the same
transaction; only a fire this caller inserted, or a pending fire it claimed, is
published by it, and a claim pushes ``publish_after`` forward so that no other Beat
publishes the same fire before ``gaffer_republish_after`` has passed.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import ColumnElement, Connection, and_, bindparam, exists, func, or_, select, update
from sqlalchemy.dialects import postgresql, sqlite

from ..protocol import FireState, fire_key, fire_task_id
from .arrays import any_of, matches, on_postgresql, unnest, unnest_select
from .dbclock import db_now
from .models import Models, table_of
from .prebuilt import prebuilt

# Rows per statement when a list of ids or parameters is sent to the database.
CHUNK = 1000


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
    #: When it was to be sent (its ``publish_after`` when it was claimed), if known.
    send_at: datetime | None = None


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
    #: Why a calendar skipped or moved it (see ``FireRow.reason``).
    reason: str | None = None


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
    ("reason", "str"),
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
                "reason": fire.reason,
            }
        )
    returning = (table.c.id, table.c.schedule, table.c.nominal_at)
    inserted: list[Fire] = []
    by_fire = {(row["schedule"], row["nominal_at"]): row for row in rows}
    for start in range(0, len(rows), CHUNK):
        part = rows[start : start + CHUNK]
        result: Iterable[Any]
        # ``reason`` is written only when a fire has one (a calendar's): the same
        # statement as before it existed otherwise.
        reasons = any(row["reason"] is not None for row in part)
        if on_postgresql(conn):
            names = _FIRE_COLUMNS if reasons else _FIRE_COLUMNS[:-1]
            arrays = {"b_" + name: [row[name] for row in part] for name, _ in names}
            result = conn.execute(_insert_statement(models, reasons), arrays).all()
        else:
            if not reasons:
                part = [{k: v for k, v in row.items() if k != "reason"} for row in part]
            stmt = sqlite.insert(table).on_conflict_do_nothing().returning(*returning)
            result = conn.execute(stmt, part)
        for fire_id, schedule, nominal_at in result:
            row = by_fire[(schedule, nominal_at)]
            if row["state"] == FireState.PENDING:
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


def _insert_statement(models: Models, reasons: bool) -> Any:
    """``INSERT ... SELECT FROM unnest(...) ON CONFLICT DO NOTHING RETURNING`` (PostgreSQL),
    built once."""

    def build() -> Any:
        table = table_of(models.Fire)
        columns = _FIRE_COLUMNS if reasons else _FIRE_COLUMNS[:-1]
        return (
            postgresql.insert(table)
            .from_select([name for name, _ in columns], unnest_select(columns))
            .on_conflict_do_nothing()
            .returning(table.c.id, table.c.schedule, table.c.nominal_at)
        )

    return prebuilt(("fires-insert", models.prefix, reasons), build)


def _set_by_ids(models: Models, name: str, *, pending: bool = False, **values: Any) -> Any:
    """``UPDATE fires SET values WHERE id = ANY(:ids)`` (PostgreSQL; ``pending``: and the
    fire is pending), built once under ``name``; ``values`` hold bound parameters or SQL
    expressions."""

    def build() -> Any:
        table = table_of(models.Fire)
        stmt = update(table).where(any_of(table.c.id, "ids", "bigint"))
        if pending:
            stmt = stmt.where(table.c.state == FireState.PENDING)
        return stmt.values(**values)

    return prebuilt(("fires-" + name, models.prefix), build)


def claim_pending(
    conn: Connection,
    models: Models,
    now: datetime,
    until: datetime,
    limit: int,
    *,
    ahead: timedelta = timedelta(0),
) -> list[Fire]:
    """Claim pending fires due to be published, pushing ``publish_after`` to ``until``
    (at least ``gaffer_republish_after`` past the last send time claimed).

    Due: a fire never claimed whose send time is at most ``ahead`` away (a jittered
    fire; the caller sends it at its ``send_at``), and a claimed one whose claim has run
    out (its publisher died between commit and publish, or between publish and marking
    it sent). A live claim is never taken early.
    """
    claimed = lock_due_fires(conn, models, FireState.PENDING, now, limit, unclaimed_ahead=ahead)
    if claimed:
        table = table_of(models.Fire)
        for start in range(0, len(claimed), CHUNK):
            ids = [fire.id for fire in claimed[start : start + CHUNK]]
            if on_postgresql(conn):
                stmt = _set_by_ids(
                    models,
                    "claim",
                    publish_after=bindparam("until", type_=table.c.publish_after.type),
                    publish_count=table.c.publish_count + 1,
                )
                conn.execute(stmt, {"ids": ids, "until": until})
                continue
            conn.execute(
                update(table)
                .where(matches(conn, table.c.id, ids, "bigint"))
                .values(publish_after=until, publish_count=table.c.publish_count + 1)
            )
    return claimed


def lock_due_fires(
    conn: Connection,
    models: Models,
    state: str,
    now: datetime,
    limit: int,
    *,
    unclaimed_ahead: timedelta = timedelta(0),
) -> list[Fire]:
    """Lock fires in ``state`` whose ``publish_after`` has passed, and those never
    published whose ``publish_after`` is at most ``unclaimed_ahead`` away (other Beats
    skip them).

    ``publish_count`` of the returned fires is the number of the send about to be made,
    ``send_at`` their ``publish_after`` as found.
    """
    f = models.Fire
    # The bound on publish_after first: an index range, whatever the OR leaves out.
    due: ColumnElement[bool] = f.publish_after <= now + unclaimed_ahead
    if unclaimed_ahead:
        due = and_(due, or_(f.publish_after <= now, f.publish_count == 0))
    stmt = (
        select(
            f.id,
            f.schedule,
            f.nominal_at,
            f.key,
            f.task_id,
            f.kind,
            f.publish_count,
            f.publish_after,
        )
        .where(f.state == state, due)
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
            row.publish_after,
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
    if on_postgresql(conn):
        timed = table.c.sent_at.type
        confirm = {} if confirm_at is None else {"publish_after": bindparam("confirm", type_=timed)}
        stmt = _set_by_ids(
            models,
            "mark-sent" if confirm_at is None else "mark-sent-confirm",
            pending=True,
            state=FireState.SENT,
            sent_at=bindparam("now", type_=timed),
            **confirm,
        )
        params: dict[str, Any] = {"now": now}
        if confirm_at is not None:
            params["confirm"] = confirm_at
        for start in range(0, len(id_list), CHUNK):
            conn.execute(stmt, {**params, "ids": id_list[start : start + CHUNK]})
        return
    values: dict[str, Any] = {"state": FireState.SENT, "sent_at": now}
    if confirm_at is not None:
        values["publish_after"] = confirm_at
    for start in range(0, len(id_list), CHUNK):
        conn.execute(
            update(table)
            .where(
                matches(conn, table.c.id, id_list[start : start + CHUNK], "bigint"),
                table.c.state == FireState.PENDING,
            )
            .values(**values)
        )


def unclaim(
    conn: Connection, models: Models, claims: Sequence[tuple[int, datetime, datetime]]
) -> None:
    """Give back claimed fires that were not sent, as ``(id, send_at, claimed_until)``:
    each ``pending`` from its own ``send_at`` again, its claim's publish uncounted, for
    any Beat to publish. A fire whose claim is no longer this one (``publish_after``
    moved: another Beat took it after the claim ran out) is left as it is."""
    if not claims:
        return
    table = table_of(models.Fire)
    stmt = (
        update(table)
        .where(
            table.c.id == bindparam("b_id"),
            table.c.state == FireState.PENDING,
            table.c.publish_after == bindparam("b_claimed"),
        )
        .values(
            publish_after=bindparam("b_send_at", type_=table.c.publish_after.type),
            publish_count=table.c.publish_count - 1,
        )
    )
    conn.execute(
        stmt,
        [
            {"b_id": fire_id, "b_send_at": send_at, "b_claimed": claimed}
            for fire_id, send_at, claimed in claims
        ],
    )


def mark_cancelled(conn: Connection, models: Models, ids: Iterable[int]) -> None:
    """A pending fire whose schedule was removed is never published."""
    table = table_of(models.Fire)
    id_list = list(ids)
    if id_list:
        conn.execute(
            update(table)
            .where(matches(conn, table.c.id, id_list, "bigint"))
            .values(state=FireState.CANCELLED)
        )


def latest_nominal(conn: Connection, models: Models, schedule: str, until: datetime) -> Any:
    """The newest nominal time ``<= until`` the ledger has for ``schedule`` (None: none)."""
    fires = models.Fire
    return conn.execute(
        select(func.max(fires.nominal_at)).where(
            fires.schedule == schedule,
            fires.nominal_at <= until,
            fires.state != FireState.SKIPPED,
        )
    ).scalar()


def latest_nominals(
    conn: Connection, models: Models, bounds: Sequence[tuple[str, datetime]]
) -> dict[str, Any]:
    """:func:`latest_nominal` of many ``(schedule, until)`` pairs at once, by schedule.

    On PostgreSQL one statement per chunk (each pair an index lookup of the ledger's
    ``(schedule, nominal_at)`` key); elsewhere one query per pair.
    """
    if not on_postgresql(conn):
        return {name: latest_nominal(conn, models, name, until) for name, until in bounds}
    fires = table_of(models.Fire)
    source = unnest((("schedule", "str"), ("until", "datetime")))
    newest = (
        select(func.max(fires.c.nominal_at))
        .where(
            fires.c.schedule == source.c.schedule,
            fires.c.nominal_at <= source.c.until,
            fires.c.state != FireState.SKIPPED,
        )
        .scalar_subquery()
    )
    stmt = select(source.c.schedule, newest)
    found: dict[str, Any] = {}
    for start in range(0, len(bounds), CHUNK):
        part = bounds[start : start + CHUNK]
        params = {"b_schedule": [name for name, _ in part], "b_until": [t for _, t in part]}
        found.update((name, value) for name, value in conn.execute(stmt, params))
    return found


def set_fires(conn: Connection, models: Models, ids: Sequence[int], **values: Any) -> None:
    """Set ``values`` on the fires ``ids`` (a SQL expression may use the row's columns)."""
    if ids:
        table = table_of(models.Fire)
        for start in range(0, len(ids), CHUNK):
            part = ids[start : start + CHUNK]
            conn.execute(
                update(table).where(matches(conn, table.c.id, part, "bigint")).values(**values)
            )


def republish(
    conn: Connection, models: Models, ids: Sequence[int], publish_after: datetime, sent_at: datetime
) -> None:
    """Fires published again: one more send, checked again after ``publish_after``."""
    table = table_of(models.Fire)
    set_fires(
        conn,
        models,
        ids,
        publish_after=publish_after,
        sent_at=sent_at,
        publish_count=table.c.publish_count + 1,
    )


def run_states(conn: Connection, models: Models, task_ids: Sequence[str]) -> list[tuple[str, str]]:
    """``(task id, state)`` of every run record of ``task_ids``."""
    runs = table_of(models.JobRun)
    rows = conn.execute(
        select(runs.c.task_id, runs.c.state).where(matches(conn, runs.c.task_id, task_ids, "str"))
    )
    return [(task_id, state) for task_id, state in rows]


def send_facts(
    conn: Connection, models: Models, ids: Sequence[int]
) -> list[tuple[int, datetime, datetime | None, str | None]]:
    """``(id, created_at, sent_at, task)`` of the fires ``ids`` (task: their schedule's)."""
    fires, schedules = table_of(models.Fire), table_of(models.Schedule)
    rows = conn.execute(
        select(fires.c.id, fires.c.created_at, fires.c.sent_at, schedules.c.task)
        .join(schedules, schedules.c.name == fires.c.schedule, isouter=True)
        .where(matches(conn, fires.c.id, ids, "bigint"))
    )
    return [(fire_id, created, sent, task) for fire_id, created, sent, task in rows]


def sends_by_task(
    conn: Connection, models: Models, since: datetime
) -> dict[Any, tuple[datetime | None, datetime | None]]:
    """Per task, of the fires created since ``since``: the latest send, and the latest
    send whose run started (has a run record)."""
    fires, runs = table_of(models.Fire), table_of(models.JobRun)
    schedules = table_of(models.Schedule)
    started = exists(select(runs.c.id).where(runs.c.task_id == fires.c.task_id))
    rows = conn.execute(
        select(
            schedules.c.task,
            func.max(fires.c.sent_at),
            func.max(fires.c.sent_at).filter(started),
        )
        .join(schedules, schedules.c.name == fires.c.schedule)
        .where(fires.c.created_at >= since, fires.c.sent_at.is_not(None))
        .group_by(schedules.c.task)
    )
    return {task: (last_sent, last_started) for task, last_sent, last_started in rows}


def reopen(conn: Connection, models: Models, task_ids: list[str], **values: Any) -> None:
    """Put the fires of ``task_ids`` back to ``sent`` for delivery confirmation, with
    ``values`` (``publish_after``: when to check; ``sent_at``: when its latest message was
    sent). A run record proves delivery only while it can still end the fire: one lost
    with its worker, or one that ended ``retrying``, does not."""
    if task_ids:
        fires = table_of(models.Fire)
        conn.execute(
            update(fires)
            .where(
                matches(conn, fires.c.task_id, task_ids, "str"),
                fires.c.state.in_((FireState.SENT, FireState.DELIVERED)),
            )
            .values(state=FireState.SENT, **values)
        )


def reopen_now(conn: Connection, models: Models, task_ids: list[str]) -> None:
    """:func:`reopen` the fires of ``task_ids`` for a check now, by the database's clock."""
    reopen(conn, models, task_ids, publish_after=db_now())
