"""Import the app's own ``beat_schedule`` (Celery schedule objects) as ``db`` schedules.

Each entry is translated exactly (``celery_gaffer.schedules.celery_beat``) or reported as
cannot be mapped, with the reason; nothing is approximated. Applying is idempotent: an
entry equal to its stored schedule is not written. A ``celerybeat-schedule`` shelve
(Celery's ``PersistentScheduler``) gives each new schedule its last run as watermark.
"""

from __future__ import annotations

import shelve
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from ..exceptions import GafferError, InvalidInput, ScheduleNotFound
from ..schedule_store import ScheduleStore
from ..schedules.celery_beat import translate
from ..schedules.spec import ScheduleSpec, validate_entry
from ..store.schedule_rows import StoredSchedule, policy_dict

# The files dbm writes for a shelve named ``path`` (as Celery's PersistentScheduler knows).
_SHELVE_SUFFIXES = ("", ".db", ".dat", ".dir")
ADDED, CHANGED, UNCHANGED, REFUSED = "added", "changed", "unchanged", "cannot be mapped"


@dataclass(frozen=True, slots=True)
class ImportLine:
    """What the import does (or would do) to one entry."""

    name: str
    outcome: str
    detail: str = ""
    note: str | None = None

    def render(self) -> str:
        detail = f": {self.detail}" if self.detail else ""
        note = f" (note: {self.note})" if self.note else ""
        return f"{self.name}: {self.outcome}{detail}{note}"


@dataclass(frozen=True, slots=True)
class ImportReport:
    lines: list[ImportLine]
    dry_run: bool

    def count(self, outcome: str) -> int:
        return sum(1 for line in self.lines if line.outcome == outcome)

    def summary(self) -> str:
        if not self.lines:
            return "no entries in beat_schedule: nothing to import"
        counts = ", ".join(
            f"{self.count(outcome)} {outcome}" for outcome in (ADDED, CHANGED, UNCHANGED)
        )
        dry = " (dry run: nothing written)" if self.dry_run else ""
        return f"{len(self.lines)} entries: {counts}, {self.count(REFUSED)} cannot be mapped{dry}"


def app_zone(app: Any) -> str:
    """The zone Celery evaluates the app's crontabs in: ``timezone``, else UTC."""
    configured = app.conf.timezone
    if configured:
        return str(configured)
    if not app.conf.enable_utc:
        raise InvalidInput(
            "timezone: the app has enable_utc=False and no timezone, so its crontabs run "
            "in the machine's local time: set app.conf.timezone to import them",
            field="timezone",
        )
    return "UTC"


def read_shelve(path: str | Path) -> dict[str, datetime]:
    """Each entry's ``last_run_at`` (aware, UTC) from a Celery ``celerybeat-schedule`` file.

    The file is opened read-only with :mod:`shelve`, which unpickles it: Celery's
    ``PersistentScheduler`` writes it that way. Read only a file your own Beat wrote.
    """
    if not any(Path(f"{path}{suffix}").is_file() for suffix in _SHELVE_SUFFIXES):
        raise InvalidInput(f"shelve: no file {str(path)!r}", field="shelve")
    try:
        with shelve.open(str(path), flag="r") as db:  # the user's own Beat file
            entries = db.get("entries", {})
            runs = {
                str(name): _utc(getattr(entry, "last_run_at", None))
                for name, entry in dict(entries).items()
            }
    except Exception as exc:  # any failure: one message naming the file
        raise InvalidInput(
            f"shelve: cannot read {str(path)!r} as a celerybeat-schedule file: "
            f"{type(exc).__name__}: {exc}",
            field="shelve",
        ) from exc
    return {name: when for name, when in runs.items() if when is not None}


def _utc(value: Any) -> datetime | None:
    if not isinstance(value, datetime):
        return None
    if value.utcoffset() is None:  # Celery's naive times are UTC
        return value.replace(tzinfo=timezone.utc)
    return value.astimezone(timezone.utc)


def import_beat_schedule(
    store: ScheduleStore,
    beat_schedule: Mapping[str, Any],
    *,
    last_runs: Mapping[str, datetime] | None = None,
    dry_run: bool = False,
) -> ImportReport:
    """Write (or, with ``dry_run``, only compare) each entry of ``beat_schedule``."""
    tz = app_zone(store.app)
    known = _known_tasks(store.app)
    runs = last_runs or {}
    lines = []
    for name, entry in beat_schedule.items():
        lines.append(_one(store, str(name), entry, tz, known, runs.get(str(name)), dry_run))
    return ImportReport(lines, dry_run)


def _known_tasks(app: Any) -> Mapping[str, Any]:
    app.loader.import_default_modules()
    tasks: Mapping[str, Any] = app.tasks
    return tasks


def _one(
    store: ScheduleStore,
    name: str,
    entry: Any,
    tz: str,
    known: Mapping[str, Any],
    last_run: datetime | None,
    dry_run: bool,
) -> ImportLine:
    try:
        if not isinstance(entry, Mapping):
            raise InvalidInput(f"expected a dict, got {type(entry).__name__}")
        translation = translate(entry.get("schedule"), tz)
        spec = validate_entry(
            name=name,
            task=entry.get("task"),
            schedule=translation.schedule,
            args=entry.get("args", ()),
            kwargs=entry.get("kwargs"),
            options=entry.get("options"),
            gaffer=entry.get("gaffer"),
            known_tasks=known,
        )
    except GafferError as exc:
        return ImportLine(name, REFUSED, str(exc))
    note = translation.note
    current = _stored(store, spec.name)
    if current is None:
        detail = f"{spec.task}, {_describe(spec)}"
        if last_run is not None:
            detail += f", last run {last_run.isoformat()} from the shelve"
        if not dry_run:
            _write(store, spec, replace=False, watermark=last_run)
        return ImportLine(spec.name, ADDED, detail, note)
    changed = _changed_fields(spec, current)
    if not changed:
        return ImportLine(spec.name, UNCHANGED, note=note)
    if not dry_run:
        _write(store, spec, replace=True, watermark=None)
    return ImportLine(spec.name, CHANGED, ", ".join(changed), note)


def _stored(store: ScheduleStore, name: str) -> StoredSchedule | None:
    try:
        return store.get(name)
    except ScheduleNotFound:
        return None


def _describe(spec: ScheduleSpec) -> str:
    return repr(spec.schedule)


def _changed_fields(spec: ScheduleSpec, current: StoredSchedule) -> list[str]:
    stored_timing = None if current.schedule is None else current.schedule.to_dict()
    pairs = {
        "task": (spec.task, current.task),
        "schedule": (spec.schedule.to_dict(), stored_timing),
        "args": (spec.args, current.args),
        "kwargs": (spec.kwargs, current.kwargs),
        "options": (spec.options, current.options),
        "gaffer": (policy_dict(spec.policy), policy_dict(current.policy)),
        "source": ("db", current.source),
        "error": (None, current.error),
    }
    return [field for field, (new, old) in pairs.items() if new != old]


def _write(
    store: ScheduleStore, spec: ScheduleSpec, *, replace: bool, watermark: datetime | None
) -> None:
    store.add(
        spec.name,
        spec.task,
        spec.schedule,
        args=spec.args,
        kwargs=spec.kwargs,
        options=spec.options,
        gaffer=policy_dict(spec.policy),
        replace=replace,
        watermark_at=watermark,
    )


__all__ = ["ImportLine", "ImportReport", "app_zone", "import_beat_schedule", "read_shelve"]
