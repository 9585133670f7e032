"""Beat's sync of ``app.conf.beat_schedule`` into the schedules table (source ``config``).

Called through :meth:`ScheduleStore.sync_config`, in one transaction: new entries are
added, changed ones updated (watermark and paused state kept), config schedules no
longer configured removed. A bad entry is stored in ``error`` and the others synced.
Each schedule it adds, changes or removes is recorded in the audit log (actions ``add``,
``update``, ``remove``; source ``config``) in the same transaction.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import replace
from datetime import datetime
from typing import Any

from sqlalchemy import Connection
from sqlalchemy.exc import IntegrityError

from .beat.plan import with_checked_calendars
from .clock import Clock
from .exceptions import GafferError, InvalidInput
from .protocol import Catchup, Overlap
from .schedules import watermarks
from .schedules.spec import ScheduleSpec, validate_entry, validate_name
from .store import Database
from .store import schedules as rows
from .store.audit import Actor, record
from .store.audit_changes import changes as audit_changes
from .store.calendars import loader
from .store.schedule_rows import StoredSchedule, columns, differs, stored

logger = logging.getLogger("celery_gaffer.schedules")


def sync_config(
    database: Database,
    beat_schedule: Mapping[str, Mapping[str, Any]],
    *,
    known: Mapping[str, Any] | None,
    clock: Clock,
    source: str,
    actor: Actor,
) -> None:
    """See :meth:`ScheduleStore.sync_config`; new rows get ``source``; the audit log's
    entries name ``actor``."""
    specs: list[ScheduleSpec] = []
    broken: dict[str, dict[str, Any]] = {}
    for name, entry in beat_schedule.items():
        try:
            specs.append(_config_spec(name, entry, known))
        except GafferError as exc:
            message = f"beat_schedule[{name!r}]: {exc}"
            try:
                validate_name(name)
            except GafferError:
                logger.error(
                    "%s; the entry is ignored and the others keep firing",
                    message,
                    extra={"action": "config_entry_invalid"},
                )
                continue
            logger.error(
                "%s; the entry is marked in error and the others keep firing",
                message,
                extra={"action": "config_entry_invalid", "schedule": name},
            )
            broken[name] = {"entry": entry, "message": message, "field": exc.field}
    for attempt in range(2):
        try:
            _sync(database, specs, broken, known, clock(), source, actor)
            return
        except IntegrityError:
            # Another Beat inserted the same entry concurrently; its rows are now visible.
            if attempt:
                raise


def _sync(
    database: Database,
    specs: list[ScheduleSpec],
    broken: dict[str, dict[str, Any]],
    known: Mapping[str, Any] | None,
    now: datetime,
    source: str,
    actor: Actor,
) -> None:
    models = database.models

    def recorded(conn: Connection, action: str, name: str, before: StoredSchedule | None) -> None:
        after = None if action == "remove" else rows.read_schedule(conn, models, name)
        changes = audit_changes(before, after)
        if changes or action != "update":
            note = "from app.conf.beat_schedule"
            record(conn, models, actor, action, name, now, note=note, changes=changes)

    wanted = {spec.name: spec for spec in specs}
    with database.begin() as conn:
        calendars = loader(conn, models)
        existing = rows.lock_config_rows(conn, models, [*wanted, *broken])
        for name in [*wanted, *broken]:
            row = existing.get(name)
            if row is not None and row["source"] != "config":
                logger.warning(
                    "beat_schedule entry %r ignored: a schedule of source %r has that name",
                    name,
                    row["source"],
                    extra={"action": "config_entry_ignored", "schedule": name},
                )
                continue
            current = None if row is None else stored(row)
            if name in wanted:
                spec = wanted[name]
                missing: dict[str, Any] = {}
                try:
                    spec = with_checked_calendars(spec, calendars, now)
                except GafferError as exc:  # a stored calendar it names does not exist,
                    # or no fire survives them. In error, as an entry whose task this app
                    # lacks: Beat checks it again.
                    missing = {"error": f"{name}: {exc}", "next_fire_at": now, "check_at": now}
                    missing["enabled"] = spec.policy.enabled
                # An entry in error: its next fire is not searched for (its columns are
                # those of the entry paused, ``missing`` then says when Beat checks it).
                timing = spec
                if missing:
                    timing = replace(spec, policy=replace(spec.policy, enabled=False))
                if current is None:
                    new_row = {"name": name, "source": source, "created_at": now}
                    new_row.update(columns(timing, watermarks.added(spec, now).watermark_at, now))
                    rows.insert_schedules(conn, models, [{**new_row, **missing}])
                    recorded(conn, "add", name, None)
                    continue
                start = watermarks.kept(current.standing, spec, now)
                values = columns(timing, start.watermark_at, now, start.fired_count)
                values.update(missing)
                if watermarks.stays_paused(current.standing):
                    values.update(enabled=False, next_fire_at=None, check_at=None)
                if current.error is not None or missing or differs(current, spec):
                    rows.update_schedule(conn, models, name, values)
                    recorded(conn, "update", name, current)
                continue
            values = _error_values(name, broken[name], known, now)
            if current is None:
                new_row = {"name": name, "source": "config", "created_at": now, **values}
                rows.insert_schedules(conn, models, [new_row])
                recorded(conn, "add", name, None)
            else:
                values["watermark_at"] = current.watermark_at
                if watermarks.stays_paused(current.standing):
                    values.update(enabled=False, next_fire_at=None, check_at=None)
                rows.update_schedule(conn, models, name, values)
                recorded(conn, "update", name, current)
        gone = [
            n
            for n, row in existing.items()
            if row["source"] == "config" and n not in wanted and n not in broken
        ]
        rows.delete_schedules(conn, models, gone)
        for name in gone:
            recorded(conn, "remove", name, stored(existing[name]))


def _config_spec(name: Any, entry: Any, known: Mapping[str, Any] | None) -> ScheduleSpec:
    if not isinstance(entry, Mapping):
        raise InvalidInput("expected a dict", field="beat_schedule")
    return validate_entry(
        name=name,
        task=entry.get("task"),
        schedule=entry.get("schedule"),
        args=entry.get("args", ()),
        kwargs=entry.get("kwargs"),
        options=entry.get("options"),
        gaffer=entry.get("gaffer"),
        known_tasks=known,
    )


def _error_values(
    name: str, broken: dict[str, Any], known: Mapping[str, Any] | None, now: datetime
) -> dict[str, Any]:
    """The columns of a config entry that failed validation: its own values when only its
    task is unknown to this app (Beat checks it again on load, see ``beat.tick``), else a
    placeholder that never fires until the entry is fixed."""
    entry = broken["entry"]
    if broken["field"] == "task" and known is not None:
        try:
            spec = _config_spec(name, entry, None)
        except GafferError:
            pass
        else:
            values = columns(spec, now, now)
            values.update(error=broken["message"], next_fire_at=now, check_at=now)
            return values
    task = entry.get("task") if isinstance(entry, Mapping) else None
    return {
        "task": task[:255] if isinstance(task, str) else "?",
        "schedule": {"kind": "invalid"},
        "args": [],
        "kwargs": {},
        "options": {},
        "catchup": Catchup.LATEST,
        "starting_deadline": None,
        "overlap": Overlap.ALLOW,
        "grace": None,
        "enabled": True,
        "watermark_at": now,
        "next_fire_at": None,
        "check_at": now,
        "error": broken["message"],
        "updated_at": now,
    }
