"""Import django-celery-beat's periodic tasks (its database tables) as ``db`` schedules.

The tables are read with SQLAlchemy Core, never through Django or django-celery-beat,
and mapped to what *its* Beat (``django_celery_beat.schedulers.DatabaseScheduler``) does
with each row: crontab rows are Celery crontabs evaluated in the row's zone (translated
exactly by :mod:`celery_gaffer.schedules.celery_beat`, or refused with the reason),
interval rows an ``every`` anchored at the last run (its Beat counts from it), clocked
rows an ``at``; solar rows cannot be mapped. Naive datetimes (SQLite) are read as UTC,
which is what Django stores there when ``USE_TZ`` is on (its default); on PostgreSQL the
columns hold instants whatever ``USE_TZ`` says. SQLite's dates arrive as text and are
parsed here, per row: a row that does not parse (a bad date, a NULL where Django never
writes one, JSON nested too deeply) is that row's "cannot be mapped", never the import's.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta, timezone
from typing import Any

from celery.schedules import ParseException, crontab

from ..exceptions import InvalidInput
from ..protocol import loads_json
from ..schedule_store import ScheduleStore
from ..schedules.celery_beat import translate
from ..schedules.kinds import At, Schedule, at, every
from ..schedules.spec import ScheduleSpec, validate_entry
from ..store.django_celery_beat import Tables, read_tables
from .common import Candidate, ImportReport, apply_candidates, refusal

WATERMARK_FROM = "from django-celery-beat"
_UTC = timezone.utc
_ONE_MICROSECOND = timedelta(microseconds=1)

_PERIODS = {"days": 86400, "hours": 3600, "minutes": 60, "seconds": 1, "microseconds": 1e-6}
_CRONTAB_FIELDS = ("minute", "hour", "day_of_week", "day_of_month", "month_of_year")


def import_django_celery_beat(
    store: ScheduleStore, tables: Tables, *, dry_run: bool = False
) -> ImportReport:
    """Write (or, with ``dry_run``, only compare) one schedule per periodic task."""
    known = _known_tasks(store.app)
    now = datetime.now(_UTC)
    candidates = [_candidate(row, tables, known, now) for row in tables.tasks]
    return apply_candidates(
        store, candidates, dry_run=dry_run, source="django-celery-beat's periodic tasks"
    )


def _known_tasks(app: Any) -> Mapping[str, Any]:
    app.loader.import_default_modules()
    tasks: Mapping[str, Any] = app.tasks
    return tasks


def _candidate(
    row: Mapping[str, Any], tables: Tables, known: Mapping[str, Any], now: datetime
) -> Candidate:
    name = str(row["name"])
    notes: list[str] = []
    try:
        last_run = utc(row["last_run_at"], "last_run_at")
        # What its Beat counts from when the row never ran (ModelEntry.__init__).
        reference = last_run or utc(row["date_changed"], "date_changed") or now
        schedule = _schedule(row, tables, reference, notes)
        entry = _entry(row, schedule, reference, notes, known)
        watermark, source = _watermark(row, schedule, last_run, reference, now, notes)
    except Exception as exc:  # noqa: BLE001 - whatever the row holds, only it is refused
        return refusal(name, exc)
    return Candidate(
        entry.name,
        entry,
        note="; ".join(notes) or None,
        watermark=watermark,
        watermark_from=source,
    )


def _schedule(
    row: Mapping[str, Any], tables: Tables, reference: datetime, notes: list[str]
) -> Schedule:
    """The schedule of ``row``, in its Beat's order of precedence
    (``PeriodicTask.scheduler``: interval, crontab, solar, clocked)."""
    if row["interval_id"] is not None:
        interval = _linked(tables.intervals, row["interval_id"], "interval")
        period = _PERIODS.get(str(interval["period"]))
        if period is None:
            raise InvalidInput(f"interval: unknown period {interval['period']!r}", field="interval")
        count = interval["every"]
        if isinstance(count, bool) or not isinstance(count, int):
            raise InvalidInput(f"interval: every {count!r} is not a whole number", field="interval")
        seconds = count * period
        if seconds != int(seconds) or seconds < 1:
            raise InvalidInput(
                f"interval: Gaffer intervals are whole seconds, got every {interval['every']} "
                f"{interval['period']}",
                field="interval",
            )
        anchor = utc(row["start_time"], "start_time") if row["last_run_at"] is None else None
        anchor = anchor or reference
        notes.append(
            "anchored at its last run (else start_time, else date_changed), which its Beat "
            "counts each interval from"
        )
        return every(int(seconds), anchor=anchor)
    if row["crontab_id"] is not None:
        fields = _linked(tables.crontabs, row["crontab_id"], "crontab")
        value = _crontab(fields)
        translation = translate(value, str(fields["timezone"] or "UTC"))
        if translation.note:
            notes.append(translation.note)
        return translation.schedule
    if row["solar_id"] is not None:
        solar = _linked(tables.solar, row["solar_id"], "solar")
        raise InvalidInput(
            f"solar: solar events are not supported ({solar['event']} at "
            f"{solar['latitude']}, {solar['longitude']})",
            field="solar",
        )
    if row["clocked_id"] is not None:
        clocked = _linked(tables.clocked, row["clocked_id"], "clocked")
        when = utc(clocked["clocked_time"], "clocked_time")
        if when is None:
            raise InvalidInput("clocked: no clocked_time", field="clocked")
        return at(when)
    raise InvalidInput(
        "schedule: none of interval, crontab, solar or clocked is set", field="schedule"
    )


def _crontab(fields: Mapping[str, Any]) -> crontab:
    """Celery's crontab of a crontab row, or InvalidInput naming the field it refuses."""
    for field in _CRONTAB_FIELDS:
        if not isinstance(fields[field], str):
            raise InvalidInput(f"crontab: {field} {fields[field]!r} is not text", field="crontab")
    try:
        return crontab(**{field: fields[field] for field in _CRONTAB_FIELDS})
    except (ValueError, ParseException) as exc:
        bad = next((field for field in _CRONTAB_FIELDS if not _parses(field, fields[field])), "")
        shown = f"{bad} {fields[bad]!r}: " if bad else ""
        raise InvalidInput(f"crontab: {shown}{exc}", field="crontab") from exc


def _parses(field: str, value: str) -> bool:
    try:
        crontab(**{field: value})
    except (ValueError, ParseException):
        return False
    return True


def _linked(rows: Mapping[int, dict[str, Any]], key: int, field: str) -> dict[str, Any]:
    found = rows.get(key)
    if found is None:
        raise InvalidInput(f"{field}: the {field} row {key} does not exist", field=field)
    return found


def _entry(
    row: Mapping[str, Any],
    schedule: Schedule,
    reference: datetime,
    notes: list[str],
    known: Mapping[str, Any],
) -> ScheduleSpec:
    options: dict[str, Any] = {
        name: row[name]
        for name in ("queue", "exchange", "routing_key", "priority")
        if row[name] is not None
    }
    if row["expire_seconds"]:
        options["expires"] = row["expire_seconds"]
    headers = loads_json(row["headers"] or "{}", "headers")
    if not isinstance(headers, dict):
        raise InvalidInput("headers: expected a JSON object", field="headers")
    # Its Beat adds the periodic task's name to every message's headers.
    options["headers"] = {**headers, "periodic_task_name": row["name"]}
    gaffer: dict[str, Any] = {"enabled": bool(row["enabled"])}
    if not row["enabled"]:
        notes.append("disabled: imported paused")
    start = utc(row["start_time"], "start_time")
    if start is not None:
        gaffer["start_at"] = start
    expires = utc(row["expires"], "expires")
    end = None
    if expires is not None:
        # Its Beat stops once now >= expires: the last fire it sends is before it.
        end = expires - _ONE_MICROSECOND
        notes.append("expires: end_at just before it; its messages' absolute expiry is not kept")
    if row["one_off"]:
        if not isinstance(schedule, At):  # an at fires once anyway
            gaffer["max_runs"] = 1
        if row["total_run_count"]:
            # Its Beat disables a one-off that ran, without sending it again.
            ran = utc(row["last_run_at"], "last_run_at") or reference
            end = ran if end is None else min(end, ran)
            notes.append("one_off that already ran: ends at its last run, as its Beat stops it")
    if end is not None:
        gaffer["end_at"] = end
    return validate_entry(
        name=row["name"],
        task=row["task"],
        schedule=schedule,
        args=loads_json(row["args"] or "[]", "args"),
        kwargs=loads_json(row["kwargs"] or "{}", "kwargs"),
        options=options,
        gaffer=gaffer,
        known_tasks=known,
    )


def _watermark(
    row: Mapping[str, Any],
    schedule: Schedule,
    last_run: datetime | None,
    reference: datetime,
    now: datetime,
    notes: list[str],
) -> tuple[datetime | None, str]:
    """Where the new schedule starts from: the row's last run, else (never ran) the
    instant its Beat counts from, so the same missed fire is caught up."""
    if last_run is not None:
        mark, source = last_run, WATERMARK_FROM
    else:
        mark = reference
        source = f"{WATERMARK_FROM} (never ran: date_changed, where its Beat starts)"
        if isinstance(schedule, At) and schedule.when <= mark:
            # Its Beat sends a clocked task that never ran, however late.
            mark = schedule.when - timedelta(seconds=1)
            source = f"{WATERMARK_FROM} (never ran: before clocked_time, its Beat sends it)"
    if mark > now:
        notes.append(f"last run {mark.isoformat()} is in the future: starts from now")
        return None, ""
    return mark, source


def utc(value: Any, field: str) -> datetime | None:
    """An aware UTC datetime; a naive one is UTC (Django stores UTC when ``USE_TZ``).

    ``value`` is a datetime (PostgreSQL), ISO text (SQLite's column) or None; anything
    else is InvalidInput naming ``field``.
    """
    if value is None:
        return None
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value)
        except ValueError as exc:
            raise InvalidInput(f"{field}: not a date: {value!r}", field=field) from exc
    if not isinstance(value, datetime):
        raise InvalidInput(f"{field}: not a date: {value!r}", field=field)
    if value.utcoffset() is None:
        return value.replace(tzinfo=_UTC)
    return value.astimezone(_UTC)


__all__ = ["Tables", "import_django_celery_beat", "read_tables", "utc"]
