"""Reading a ``celerybeat-schedule`` file (Celery's ``PersistentScheduler``) without
running what it holds.

The file is a :mod:`shelve`: a :mod:`dbm` database of pickles. Unpickling calls whatever
the pickle names, so :func:`read_entries` opens the dbm itself and loads each value with
:class:`CelerybeatUnpickler`, whose ``find_class`` (pickle's documented way to restrict
globals) hands out only what Celery writes there: its schedule entry and schedule
classes, dates, times and zones, and builtin containers. Any other name refuses the whole
file ("refused to load os.system"), before anything is called.
"""

from __future__ import annotations

import dbm
import io
import pickle
from collections.abc import Callable
from datetime import date, datetime, time, timedelta, timezone
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

from celery.beat import ScheduleEntry
from celery.schedules import crontab, schedule, solar

#: The files dbm writes for a database named ``path`` (as Celery's PersistentScheduler knows).
SHELVE_SUFFIXES = ("", ".db", ".dat", ".dir")


class RefusedGlobal(pickle.UnpicklingError):
    """The file names something a celerybeat-schedule file never holds."""


#: The largest ``entries`` value read (a schedule file of many thousand entries is far
#: smaller): a crafted file cannot make the reader hold more.
MAX_ENTRIES_BYTES = 64 * 1024 * 1024


def _arguments(name: str, args: tuple[Any, ...], most: int) -> tuple[Any, ...]:
    """The positional arguments Celery's own pickle gives ``name``, and no more: a
    crafted file cannot pass an app, or a ``nowfun`` that the constructor would call."""
    if len(args) > most:
        raise RefusedGlobal(f"refused to load {name} with {len(args)} arguments")
    return args


def _entry(*args: Any) -> ScheduleEntry:
    # name, task, last_run_at, total_run_count, schedule, args, kwargs, options
    return ScheduleEntry(*_arguments("celery.beat.ScheduleEntry", args, 8))


def _schedule(*args: Any) -> schedule:
    run_every, relative, *nowfun = _arguments("celery.schedules.schedule", args, 3)
    if any(fun is not None for fun in nowfun):
        raise RefusedGlobal("refused to load celery.schedules.schedule with a nowfun")
    return schedule(run_every, relative)


def _crontab(*args: Any) -> crontab:
    # minute, hour, day_of_week, day_of_month, month_of_year
    return crontab(*_arguments("celery.schedules.crontab", args, 5))


def _solar(*args: Any) -> solar:
    # event, lat, lon
    return solar(*_arguments("celery.schedules.solar", args, 3))


def _bytearray(data: bytes = b"") -> bytearray:
    """What a pickle of a bytearray calls (protocols before 5): from bytes only, never
    ``bytearray(n)``, which would allocate ``n`` bytes."""
    if not isinstance(data, bytes):
        raise RefusedGlobal("refused to load builtins.bytearray of anything but bytes")
    return bytearray(data)


def _zone(key: str, from_cache: bool = True) -> ZoneInfo:
    """What ``ZoneInfo``'s own pickle calls, through its public constructors."""
    return ZoneInfo(key) if from_cache else ZoneInfo.no_cache(key)


def _zone_unpickler(owner: Any, name: str) -> Callable[..., ZoneInfo]:
    """Stands for ``builtins.getattr``, which a pickled ZoneInfo calls as
    ``getattr(ZoneInfo, "_unpickle")``: that one lookup and no other (a general getattr
    reaches any module through an allowed object's globals)."""
    if owner is ZoneInfo and name == "_unpickle":
        return _zone
    raise RefusedGlobal(f"refused to load builtins.getattr (for {name!r})")


# Celery's classes are handed out as constructors, never as the classes themselves, so a
# crafted pickle cannot set attributes on them (pickle's BUILD would).
_ALLOWED: dict[tuple[str, str], Any] = {
    ("celery.beat", "ScheduleEntry"): _entry,
    ("celery.schedules", "schedule"): _schedule,
    ("celery.schedules", "crontab"): _crontab,
    ("celery.schedules", "solar"): _solar,
    ("datetime", "datetime"): datetime,
    ("datetime", "date"): date,
    ("datetime", "time"): time,
    ("datetime", "timedelta"): timedelta,
    ("datetime", "timezone"): timezone,
    ("zoneinfo", "ZoneInfo"): ZoneInfo,
    ("builtins", "getattr"): _zone_unpickler,
    ("builtins", "set"): set,
    ("builtins", "frozenset"): frozenset,
    ("builtins", "list"): list,
    ("builtins", "dict"): dict,
    ("builtins", "tuple"): tuple,
    ("builtins", "bytearray"): _bytearray,
}


class CelerybeatUnpickler(pickle.Unpickler):
    """An unpickler that loads only what a celerybeat-schedule file holds."""

    def find_class(self, module: str, name: str) -> Any:
        allowed = _ALLOWED.get((module, name))
        if allowed is None:
            raise RefusedGlobal(f"refused to load {module}.{name}")
        return allowed

    def persistent_load(self, pid: Any) -> Any:
        raise RefusedGlobal("refused to load a persistent id")


def exists(path: str | Path) -> bool:
    return any(Path(f"{path}{suffix}").is_file() for suffix in SHELVE_SUFFIXES)


def read_entries(path: str | Path) -> dict[Any, Any]:
    """The ``entries`` value of the celerybeat-schedule file at ``path`` (a dict of
    Celery's ``ScheduleEntry`` by name; empty when the file has none).

    Raises :class:`RefusedGlobal` for a name outside the allow-list, and what dbm and
    pickle raise for a file that is not a shelve.
    """
    with dbm.open(str(path), "r") as db:
        raw = db.get(b"entries")
    if raw is None:
        return {}
    if len(raw) > MAX_ENTRIES_BYTES:
        raise pickle.UnpicklingError(
            f"entries holds {len(raw)} bytes, more than the {MAX_ENTRIES_BYTES} read"
        )
    entries = CelerybeatUnpickler(io.BytesIO(raw)).load()
    if not isinstance(entries, dict):
        raise pickle.UnpicklingError(f"entries is a {type(entries).__name__}, not a dict")
    return entries


__all__ = ["SHELVE_SUFFIXES", "CelerybeatUnpickler", "RefusedGlobal", "exists", "read_entries"]
