"""Import the app's own ``beat_schedule`` (Celery schedule objects) as ``db`` schedules.

Each entry is translated exactly (``celery_gaffer.schedules.celery_beat``) or reported as
cannot be mapped, with the reason; nothing is approximated. Applying is idempotent: an
entry equal to its stored schedule is not written. A ``celerybeat-schedule`` shelve
(Celery's ``PersistentScheduler``) gives each new schedule its last run as watermark; it
is read by :mod:`.celery_shelve`, which loads nothing but Celery's own classes from it.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from ..exceptions import InvalidInput
from ..schedule_store import ScheduleStore
from ..schedules.celery_beat import translate
from ..schedules.spec import validate_entry
from .celery_shelve import RefusedGlobal, exists, read_entries
from .common import Candidate, ImportLine, ImportReport, apply_candidates, printable, refusal


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

    The file is only read, and only Celery's schedule classes, dates, zones and builtin
    containers are loaded from it: a file that names anything else is refused whole,
    before anything it names is called (InvalidInput naming ``shelve``).
    """
    if not exists(path):
        raise InvalidInput(f"shelve: no file {str(path)!r}", field="shelve")
    try:
        runs = {
            str(name): _utc(getattr(entry, "last_run_at", None))
            for name, entry in read_entries(path).items()
        }
    except RefusedGlobal as exc:
        raise InvalidInput(
            f"shelve: {printable(str(exc))} from {str(path)!r}: not a celerybeat-schedule "
            "file of Celery's (nothing was read from it)",
            field="shelve",
        ) from exc
    except Exception as exc:  # dbm's or pickle's: one message naming the file
        raise InvalidInput(
            f"shelve: cannot read {str(path)!r} as a celerybeat-schedule file: "
            f"{type(exc).__name__}: {printable(str(exc))}",
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
    candidates = [
        _candidate(str(name), entry, tz, known, runs.get(str(name)))
        for name, entry in beat_schedule.items()
    ]
    return apply_candidates(store, candidates, dry_run=dry_run, source="beat_schedule")


def _known_tasks(app: Any) -> Mapping[str, Any]:
    app.loader.import_default_modules()
    tasks: Mapping[str, Any] = app.tasks
    return tasks


def _candidate(
    name: str, entry: Any, tz: str, known: Mapping[str, Any], last_run: datetime | None
) -> Candidate:
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
    except Exception as exc:  # noqa: BLE001 - whatever the entry holds, only it is refused
        return refusal(name, exc)
    return Candidate(
        spec.name,
        spec,
        note=translation.note,
        watermark=last_run,
        watermark_from="from the shelve",
    )


__all__ = ["ImportLine", "ImportReport", "app_zone", "import_beat_schedule", "read_shelve"]
