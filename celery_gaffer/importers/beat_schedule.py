"""Import the app's own ``beat_schedule`` (Celery schedule objects) as ``db`` schedules.

Each entry is translated exactly (``celery_gaffer.schedules.celery_beat``) or reported as
cannot be mapped, with the reason; nothing is approximated. Applying is idempotent: an
entry equal to its stored schedule is not written. A ``celerybeat-schedule`` shelve
(Celery's ``PersistentScheduler``) gives each new schedule its last run as watermark.
"""

from __future__ import annotations

import shelve
from collections.abc import Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from ..exceptions import GafferError, InvalidInput
from ..schedule_store import ScheduleStore
from ..schedules.celery_beat import translate
from ..schedules.spec import validate_entry
from .common import Candidate, ImportLine, ImportReport, apply_candidates

# The files dbm writes for a shelve named ``path`` (as Celery's PersistentScheduler knows).
_SHELVE_SUFFIXES = ("", ".db", ".dat", ".dir")


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
    candidates = (
        _candidate(str(name), entry, tz, known, runs.get(str(name)))
        for name, entry in beat_schedule.items()
    )
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
    except GafferError as exc:
        return Candidate(name, None, str(exc))
    return Candidate(
        spec.name,
        spec,
        note=translation.note,
        watermark=last_run,
        watermark_from="from the shelve",
    )


__all__ = ["ImportLine", "ImportReport", "app_zone", "import_beat_schedule", "read_shelve"]
