"""``ScheduleStore``: add, update, pause, resume and remove schedules from code.

Schedules written here have source ``db``: the Beat's sync of ``beat_schedule`` never
touches them. Every method validates before it writes and writes in one transaction,
so bad input leaves nothing behind. Running Beats pick changes up on their next tick.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from datetime import datetime
from itertools import islice
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection
from sqlalchemy.exc import IntegrityError

from .beat import triggers
from .clock import Clock, utcnow
from .exceptions import GafferError, InvalidInput, ScheduleExists, ScheduleNotFound
from .protocol import Catchup, Health, Overlap
from .schedules.changes import ScheduleChanges, new_timing
from .schedules.spec import ScheduleSpec, validate_entry, validate_name
from .store import Database, database_for
from .store import schedules as rows
from .store.schedule_rows import StoredSchedule, columns, differs, policy_dict, stored

if TYPE_CHECKING:
    from typing_extensions import Unpack

logger = logging.getLogger("celery_gaffer.schedules")


class ScheduleStore:
    """Schedules from code (source ``db``); the CLI is a thin layer over this class."""

    def __init__(
        self, app: Any, *, clock: Clock = utcnow, check_tasks: bool = True, source: str = "db"
    ) -> None:
        self.app = app
        self.database: Database = database_for(app)
        self._clock = clock
        self._check_tasks = check_tasks
        self._source = source

    # -- writing --------------------------------------------------------------------

    def add(
        self,
        name: str,
        task: str,
        schedule: Any,
        *,
        args: Any = (),
        kwargs: Any = None,
        options: Any = None,
        gaffer: Mapping[str, Any] | None = None,
        replace: bool = False,
    ) -> StoredSchedule:
        """Add a schedule; its first fire is its first nominal time after now.

        Raises :class:`ScheduleExists` for an existing name unless ``replace=True``, and
        a :class:`GafferError` naming the field for bad input.
        """
        spec = self._validate(
            name=name,
            task=task,
            schedule=schedule,
            args=args,
            kwargs=kwargs,
            options=options,
            gaffer=gaffer,
        )
        now = self._clock()
        with self.database.begin() as conn:
            existing = self._row(conn, spec.name, lock=True)
            if existing is not None:
                if not replace:
                    raise ScheduleExists(
                        f"name: a schedule named {spec.name!r} already exists "
                        "(pass replace=True to overwrite it)",
                        field="name",
                    )
                values = {**columns(spec, existing.watermark_at, now), "source": self._source}
                rows.update_schedule(conn, self._models, spec.name, values)
            else:
                rows.insert_schedules(conn, self._models, [self._new_row(spec, now)])
            return self._get(conn, spec.name)

    def add_many(self, entries: Iterable[Mapping[str, Any]], *, chunk_size: int = 5000) -> int:
        """Add many schedules (dicts with ``add``'s arguments), one transaction per chunk.

        Each chunk is validated whole before it is written, and written whole or not at
        all. A bad entry raises a GafferError naming its position and field; the chunks
        before it stay written. Returns the number of schedules added.
        """
        if chunk_size < 1:
            raise InvalidInput("chunk_size: must be at least 1", field="chunk_size")
        known = self._known_tasks()
        iterator = iter(entries)
        added = 0
        while chunk := list(islice(iterator, chunk_size)):
            now = self._clock()
            new_rows = []
            for offset, entry in enumerate(chunk):
                try:
                    spec = validate_entry(**_entry_arguments(entry), known_tasks=known)
                except GafferError as exc:
                    raise type(exc)(
                        f"entry {added + offset}: {exc} ({added} schedules were added before it)",
                        field=exc.field,
                    ) from exc
                new_rows.append(self._new_row(spec, now))
            try:
                with self.database.begin() as conn:
                    rows.insert_schedules(conn, self._models, new_rows)
            except IntegrityError as exc:
                last = added + len(new_rows) - 1
                raise ScheduleExists(
                    f"name: a schedule in entries {added}-{last} already exists or is "
                    f"repeated; that chunk was not written ({added} were added before it)",
                    field="name",
                ) from exc
            added += len(new_rows)
        return added

    def update(self, name: str, **changes: Unpack[ScheduleChanges]) -> StoredSchedule:
        """Change only the given fields of ``name`` (see :class:`ScheduleChanges`).

        Everything is validated, with ``add``'s rules, before one transaction writes the
        row. A paused schedule stays paused (``pause`` and ``resume`` change that, not
        ``gaffer={"enabled": ...}``); an error is cleared (the row passed the checks).
        When the timing changes (``schedule``, ``cron``, ``every``, ``tz`` or
        ``jitter``), the schedule starts again from now, as on ``resume``: its next fire
        is its first nominal time after the edit, so a fire of the new timing that fell
        before the edit is not sent; fires already decided are never sent again. Running
        Beats use the edit on their next tick.

        A schedule of source ``config`` can be changed too (to fix one in error at once,
        say), but Beat's next start puts back what ``app.conf.beat_schedule`` says: change
        it there to keep the change.

        Raises :class:`ScheduleNotFound`, and a :class:`GafferError` naming the field for
        bad input; nothing is written then.
        """
        unknown = sorted(set(changes) - set(ScheduleChanges.__annotations__))
        if unknown:
            raise InvalidInput(f"{unknown[0]}: not an editable field", field=unknown[0])
        now = self._clock()
        with self.database.begin() as conn:
            current = self._require(conn, name, lock=True)
            policy = policy_dict(current.policy)
            given = changes.get("gaffer") or {}
            if "enabled" in given and given["enabled"] != policy.get("enabled"):
                # resume starts from now; a watermark left at the pause would send or
                # miss the paused fires.
                raise InvalidInput(
                    "gaffer.enabled: pause or resume the schedule instead", field="enabled"
                )
            policy.update(given)
            timing = new_timing(name, current.schedule, changes)
            if timing == current.schedule:
                timing = None  # the same timing: its backlog is kept
            spec = self._validate(
                name=name,
                task=changes.get("task", current.task),
                schedule=current.schedule if timing is None else timing,
                args=changes.get("args", current.args),
                kwargs=changes.get("kwargs", current.kwargs),
                options=changes.get("options", current.options),
                gaffer=policy,
            )
            watermark = current.watermark_at
            if timing is not None:
                watermark = max(watermark, now)
            rows.update_schedule(conn, self._models, name, columns(spec, watermark, now))
            return self._get(conn, name)

    def pause(self, name: str) -> StoredSchedule:
        """Stop firing ``name`` until :meth:`resume`; fires while paused are never sent."""
        return self._set_enabled(name, False)

    def resume(self, name: str) -> StoredSchedule:
        """Fire ``name`` again from its first nominal time after now."""
        return self._set_enabled(name, True)

    def remove(self, name: str) -> None:
        """Delete ``name``; its ledger and run history stay for ``cleanup`` to expire."""
        with self.database.begin() as conn:
            if rows.delete_schedules(conn, self._models, [name]) == 0:
                raise ScheduleNotFound(f"name: no schedule named {name!r}", field="name")

    def sync_config(self, beat_schedule: Mapping[str, Mapping[str, Any]]) -> None:
        """Make the ``config`` schedules match ``app.conf.beat_schedule``.

        New entries are added (first fire after now), changed ones updated (watermark and
        paused state kept), and config schedules no longer configured removed. Schedules
        of source ``db`` are never touched; a config entry with a db schedule's name is
        ignored with a warning. An entry that fails validation (an unknown task, Celery's
        ``crontab``...) is stored in ``error`` with the reason, logged once, and the
        others are synced as usual: one bad entry never stops Beat.
        """
        known = self._known_tasks()
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
                self._sync(specs, broken, known)
                return
            except IntegrityError:
                # Another Beat inserted the same entry concurrently; its rows are now visible.
                if attempt:
                    raise

    def _sync(
        self,
        specs: list[ScheduleSpec],
        broken: dict[str, dict[str, Any]],
        known: Mapping[str, Any] | None,
    ) -> None:
        now = self._clock()
        wanted = {spec.name: spec for spec in specs}
        with self.database.begin() as conn:
            existing = rows.lock_config_rows(conn, self._models, [*wanted, *broken])
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
                    if current is None:
                        rows.insert_schedules(conn, self._models, [self._new_row(spec, now)])
                        continue
                    values = columns(spec, current.watermark_at, now)
                    if not current.enabled:
                        values.update(enabled=False, next_fire_at=None, check_at=None)
                    if current.error is not None or differs(current, spec):
                        rows.update_schedule(conn, self._models, name, values)
                    continue
                values = _error_values(name, broken[name], known, now)
                if current is None:
                    new_row = {"name": name, "source": "config", "created_at": now, **values}
                    rows.insert_schedules(conn, self._models, [new_row])
                else:
                    values["watermark_at"] = current.watermark_at
                    if not current.enabled:  # a paused schedule stays paused
                        values.update(enabled=False, next_fire_at=None, check_at=None)
                    rows.update_schedule(conn, self._models, name, values)
            gone = [
                n
                for n, row in existing.items()
                if row["source"] == "config" and n not in wanted and n not in broken
            ]
            rows.delete_schedules(conn, self._models, gone)

    def trigger(self, name: str) -> str:
        """Publish one fire of ``name`` now, with its own key; returns the key."""
        return triggers.trigger(self.app, self.database, name, self._clock).key

    def backfill(
        self, name: str, start: datetime, end: datetime, *, limit: int = 10_000
    ) -> triggers.BackfillReport:
        """Publish the fires of ``name`` in ``(start, end]`` that the ledger does not have."""
        current = self.get(name)
        if current.schedule is None or current.error is not None:
            raise InvalidInput(
                f"name: schedule {name!r} is in error: {current.error}", field="name"
            )
        return triggers.backfill(
            self.app, self.database, name, current.schedule, start, end, self._clock, limit=limit
        )

    # -- reading --------------------------------------------------------------------

    def get(self, name: str) -> StoredSchedule:
        """The schedule named ``name``, or :class:`ScheduleNotFound`."""
        with self.database.read() as conn:
            return self._get(conn, name)

    def list(self, *, limit: int | None = None) -> list[StoredSchedule]:
        """Schedules ordered by name (at most ``limit``)."""
        with self.database.read() as conn:
            return rows.list_schedules(conn, self._models, limit=limit)

    # -- internals ------------------------------------------------------------------

    @property
    def _models(self) -> Any:
        return self.database.models

    def _known_tasks(self) -> Mapping[str, Any] | None:
        if not self._check_tasks:
            return None
        self.app.loader.import_default_modules()
        tasks: Mapping[str, Any] = self.app.tasks
        return tasks

    def _validate(self, **entry: Any) -> ScheduleSpec:
        return validate_entry(**entry, known_tasks=self._known_tasks())

    def _new_row(self, spec: ScheduleSpec, now: datetime) -> dict[str, Any]:
        return {
            "name": spec.name,
            "source": self._source,
            "created_at": now,
            **columns(spec, now, now),
        }

    def _set_enabled(self, name: str, enabled: bool) -> StoredSchedule:
        now = self._clock()
        with self.database.begin() as conn:
            current = self._require(conn, name, lock=True)
            values: dict[str, Any] = {"enabled": enabled, "updated_at": now}
            if enabled and current.error is not None:
                # Resuming a schedule in error checks it again: cleared if its cause is
                # gone, refused with the reason if not.
                self._recheck(current)
                values["error"] = None
            elif current.policy.enabled == enabled:
                return current
            if enabled and current.schedule is not None:
                # Fires that fell while paused are not missed: start again from now.
                watermark = max(current.watermark_at, now)
                next_fire_at = current.schedule.next_after(watermark)
                values.update(
                    watermark_at=watermark, next_fire_at=next_fire_at, check_at=next_fire_at
                )
            else:
                values.update(next_fire_at=None, check_at=None, health=Health.OK)
            rows.update_schedule(conn, self._models, name, values)
            return self._get(conn, name)

    def _recheck(self, current: StoredSchedule) -> ScheduleSpec:
        """``current`` validated again, or InvalidInput saying why it is still in error."""
        try:
            if current.schedule is None:
                raise InvalidInput(str(current.error))
            policy = policy_dict(current.policy)
            policy.pop("enabled")
            return self._validate(
                name=current.name,
                task=current.task,
                schedule=current.schedule,
                args=current.args,
                kwargs=current.kwargs,
                options=current.options,
                gaffer=policy,
            )
        except GafferError as exc:
            raise InvalidInput(
                f"name: schedule {current.name!r} is still in error: {exc}", field="name"
            ) from exc

    def _row(self, conn: Connection, name: str, *, lock: bool = False) -> StoredSchedule | None:
        return rows.read_schedule(conn, self._models, validate_name(name), lock=lock)

    def _require(self, conn: Connection, name: str, *, lock: bool = False) -> StoredSchedule:
        row = self._row(conn, name, lock=lock)
        if row is None:
            raise ScheduleNotFound(f"name: no schedule named {name!r}", field="name")
        return row

    def _get(self, conn: Connection, name: str) -> StoredSchedule:
        return self._require(conn, name)


def _entry_arguments(entry: Mapping[str, Any]) -> dict[str, Any]:
    if not isinstance(entry, Mapping):
        raise InvalidInput(f"expected a dict of add() arguments, got {type(entry).__name__}")
    allowed = {"name", "task", "schedule", "args", "kwargs", "options", "gaffer"}
    unknown = sorted(set(entry) - allowed)
    if unknown:
        raise InvalidInput(f"{unknown[0]}: not an argument of add()", field=unknown[0])
    for required in ("name", "task", "schedule"):
        if required not in entry:
            raise InvalidInput(f"{required}: missing", field=required)
    return dict(entry)


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
