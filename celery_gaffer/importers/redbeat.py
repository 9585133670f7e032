"""Import celery-redbeat's schedule (entries in Redis) as ``db`` schedules.

RedBeat keeps a sorted set ``<prefix>:schedule`` of entry keys (``<prefix><name>``), each a
hash whose ``definition`` field is the entry as JSON (``name``, ``task``, ``args``,
``kwargs``, ``options``, ``schedule``, ``enabled``) and whose ``meta`` field holds
``last_run_at``. Objects are tagged with ``__type__``: ``crontab`` (the ``crontab(...)``
arguments), ``interval`` (``every`` seconds, ``relative``), ``rrule`` (dateutil's fields,
``dtstart``/``until`` as Unix seconds plus ``*_tz`` offset minutes), ``weekday`` and
``datetime`` (its fields and ``timezone``: an IANA name or an offset in seconds).

:mod:`.redbeat_source` reads that with redis-py; this module parses the JSON itself
(redbeat is not imported, and the JSON's depth is bounded). Each entry is mapped exactly
or reported as cannot be mapped, with the reason (a key or value that is not UTF-8, a
member that is not a hash and any other failure of one entry included):

- ``crontab``: evaluated by redbeat's Beat in the app's zone, translated as
  ``beat-schedule`` does (a note on DST days that may differ);
- ``interval``: redbeat fires ``run_every`` after each actual send, so it keeps the phase of
  its last run: ``every(seconds)`` anchored at ``last_run_at``; ``relative`` rounds each
  deadline to a local minute, hour or day boundary and is refused from a minute up;
- ``rrule``: without ``by*`` rules and at most weekly, it is elapsed time in a fixed offset
  (redbeat stores ``dtstart`` as an offset, not a zone): ``every`` from ``dtstart`` with
  ``start_at``/``end_at`` bounds, or ``at(dtstart)`` for a single occurrence; anything
  else is refused.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from datetime import datetime, timedelta, timezone
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from celery.schedules import ParseException, crontab

from ..exceptions import GafferError, InvalidInput
from ..protocol import loads_json
from ..schedule_store import ScheduleStore
from ..schedules.celery_beat import translate
from ..schedules.kinds import EPOCH, Every, Schedule, at, every
from ..schedules.spec import validate_entry
from .beat_schedule import app_zone
from .common import Candidate, ImportReport, apply_candidates, refusal, stored
from .redbeat_source import (
    DEFAULT_PREFIX,
    RawEntry,
    RedbeatSchedule,
    RedbeatUnavailable,
    key_prefix_of,
    read_redbeat,
    redis_url_of,
)

UTC = timezone.utc
# dateutil's frequencies (YEARLY=0 ... SECONDLY=6) and, for those that are elapsed time in
# a fixed offset, their length.
_FREQ_NAMES = ("YEARLY", "MONTHLY", "WEEKLY", "DAILY", "HOURLY", "MINUTELY", "SECONDLY")
_FREQ_SECONDS = {2: 7 * 86400, 3: 86400, 4: 3600, 5: 60, 6: 1}
_BY_RULES = (
    "bysetpos",
    "bymonth",
    "bymonthday",
    "byyearday",
    "byeaster",
    "byweekno",
    "byweekday",
    "byhour",
    "byminute",
    "bysecond",
)


def import_redbeat(
    store: ScheduleStore, source: RedbeatSchedule, prefix: str, *, dry_run: bool = False
) -> ImportReport:
    """Write (or, with ``dry_run``, only compare) each redbeat entry as a ``db`` schedule."""
    tz = app_zone(store.app)
    app = store.app
    app.loader.import_default_modules()
    known: Mapping[str, Any] = app.tasks
    now = datetime.now(UTC)
    candidates = [_candidate(entry, prefix, tz, known, app, now) for entry in source.entries]
    candidates = [_keep_stored_phase(store, candidate) for candidate in candidates]
    return apply_candidates(
        store, candidates, dry_run=dry_run, source=f"redbeat's {source.schedule_key!r}"
    )


def _candidate(
    entry: RawEntry, prefix: str, tz: str, known: Mapping[str, Any], app: Any, now: datetime
) -> Candidate:
    key = entry.key.decode("utf-8", "backslashreplace")
    name = key[len(prefix) :] if key.startswith(prefix) else key
    try:
        _check_utf8(entry.key)
        if entry.problem is not None:
            raise InvalidInput(entry.problem, field="key")
        definition = _decode(entry.definition, "definition")
        if not isinstance(definition, dict):
            raise InvalidInput("definition: expected a JSON object", field="definition")
        if isinstance(definition.get("name"), str):
            name = definition["name"]
        meta = _decode(entry.meta, "meta") if entry.meta else {}
        last_run = meta.get("last_run_at") if isinstance(meta, dict) else None
        if last_run is not None and not isinstance(last_run, datetime):
            raise InvalidInput("meta.last_run_at: not a redbeat datetime", field="meta.last_run_at")
        last_run = None if last_run is None else last_run.astimezone(UTC)
        schedule, note, bounds = _schedule(definition.get("schedule"), tz, last_run, app)
        spec = validate_entry(
            name=name,
            task=definition.get("task"),
            schedule=schedule,
            args=definition.get("args"),
            kwargs=definition.get("kwargs"),
            options=definition.get("options"),
            gaffer={"enabled": definition.get("enabled", True), **bounds},
            known_tasks=known,
        )
    except Exception as exc:  # noqa: BLE001 - whatever the entry holds, only it is refused
        return refusal(name, exc)
    if last_run is not None and last_run > now:  # redbeat's clock is ahead of this one
        ahead = f"redbeat's last run {last_run.isoformat()} is after this clock: starts now"
        note = ahead if note is None else f"{note}; {ahead}"
        last_run = now
    return Candidate(spec.name, spec, note=note, watermark=last_run, watermark_from="from redbeat")


def _check_utf8(key: bytes) -> None:
    """Refuse a key redbeat itself (which reads text) could not have written."""
    try:
        key.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidInput(
            f"key: not UTF-8 text ({exc.reason} at byte {exc.start}): not written by redbeat",
            field="key",
        ) from exc


def _decode(value: bytes | None, field_name: str) -> Any:
    if value is None:
        raise InvalidInput(f"{field_name}: the entry's hash has no {field_name}", field=field_name)
    try:
        text = value.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidInput(
            f"{field_name}: a binary value, not redbeat's JSON (not UTF-8: {exc.reason} "
            f"at byte {exc.start})",
            field=field_name,
        ) from exc
    try:
        return loads_json(text, field_name, object_hook=_object)
    except InvalidInput:
        raise
    except (ValueError, TypeError, KeyError, ZoneInfoNotFoundError, OverflowError) as exc:
        raise InvalidInput(
            f"{field_name}: not redbeat's JSON encoding ({type(exc).__name__}: {exc})",
            field=field_name,
        ) from exc


def _object(d: dict[str, Any]) -> Any:
    """redbeat's ``RedBeatJSONDecoder`` for datetimes; other tagged objects (crontab,
    interval, rrule, weekday) stay dicts, with their ``__type__``, for :func:`_schedule`."""
    kind = d.get("__type__")
    if kind == "datetime":
        zone = d.get("timezone", "UTC")
        tzinfo = (
            timezone(timedelta(seconds=zone))
            if isinstance(zone, (int, float)) and not isinstance(zone, bool)
            else ZoneInfo(str(zone))
        )
        return datetime(
            int(d["year"]),
            int(d["month"]),
            int(d["day"]),
            int(d["hour"]),
            int(d["minute"]),
            int(d["second"]),
            int(d["microsecond"]),
            tzinfo=tzinfo,
        )
    return d


def _schedule(
    value: Any, tz: str, last_run: datetime | None, app: Any
) -> tuple[Schedule, str | None, dict[str, Any]]:
    """The Gaffer schedule, note and ``gaffer`` bounds of a redbeat ``schedule`` value."""
    kind = value.get("__type__") if isinstance(value, dict) else None
    try:
        if kind == "crontab":
            fields = ("minute", "hour", "day_of_week", "day_of_month", "month_of_year")
            try:
                value = crontab(**{f: value.get(f, "*") for f in fields}, app=app)
            except (ValueError, TypeError, ParseException) as exc:
                raise InvalidInput(f"not a valid crontab: {exc}", field="schedule") from exc
            translation = translate(value, tz)
            return translation.schedule, translation.note, {}
        if kind == "interval":
            return _interval(value, last_run)
        if kind == "rrule":
            return _rrule(value)
    except GafferError as exc:
        text = str(exc)
        raise InvalidInput(
            text if text.startswith("schedule") else f"schedule: {text}", field="schedule"
        ) from exc
    shown = kind if kind is not None else type(value).__name__
    reason = " (redbeat's encoder has no solar: it cannot store one)" if kind == "solar" else ""
    raise InvalidInput(f"schedule: not a redbeat schedule: {shown!r}{reason}", field="schedule")


def _interval(
    value: Mapping[str, Any], last_run: datetime | None
) -> tuple[Schedule, str | None, dict[str, Any]]:
    seconds = value.get("every")
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
        raise InvalidInput(f"every: expected seconds, got {seconds!r}", field="schedule")
    if value.get("relative") and seconds >= 60:
        raise InvalidInput(
            "relative=True: Celery rounds each deadline down to a local minute, hour or day "
            "boundary, so the gaps vary with the last send; no fixed interval matches",
            field="schedule",
        )
    if last_run is None:
        note = (
            "redbeat runs an interval from its last run; this entry never ran, so it fires "
            "at Gaffer's phase (multiples of the interval from the epoch)"
        )
        return every(seconds), note, {}
    note = (
        f"anchored at redbeat's last run {last_run.replace(microsecond=0).isoformat()}: "
        "redbeat runs each interval from its last send (drifting by Beat's delay), "
        "Gaffer keeps that phase"
    )
    return every(seconds, anchor=last_run), note, {}


def _rrule(value: Mapping[str, Any]) -> tuple[Schedule, str | None, dict[str, Any]]:
    freq = value.get("freq")
    name = _FREQ_NAMES[freq] if isinstance(freq, int) and 0 <= freq < 7 else repr(freq)
    used = [rule for rule in _BY_RULES if value.get(rule) not in (None, [], ())]
    interval = value.get("interval", 1)
    if isinstance(interval, bool) or not isinstance(interval, int) or interval < 1:
        raise InvalidInput(f"rrule: interval {interval!r} is not a whole number >= 1")
    start = _timestamp(value.get("dtstart"), "dtstart")
    if start is None:
        raise InvalidInput("rrule: no dtstart")
    until = _timestamp(value.get("until"), "until")
    count = value.get("count")
    if count is not None and (isinstance(count, bool) or not isinstance(count, int) or count < 1):
        raise InvalidInput(f"rrule: count {count!r} is not a whole number >= 1")
    if count == 1 and not used:
        return at(start), None, {}
    if used or freq not in _FREQ_SECONDS:
        why = f"{', '.join(used)} " if used else f"freq {name} "
        raise InvalidInput(
            f"rrule {why}is a calendar rule Gaffer cannot express exactly (mapped: a "
            "single occurrence, or SECONDLY to WEEKLY without by-rules)"
        )
    step = timedelta(seconds=interval * _FREQ_SECONDS[freq])
    last = None if count is None else start + (count - 1) * step
    if until is not None:
        if until < start:
            raise InvalidInput(f"rrule: until {until.isoformat()} is before dtstart: never fires")
        by_until = start + ((until - start) // step) * step
        last = by_until if last is None else min(last, by_until)
    if last == start:
        return at(start), None, {}
    bounds: dict[str, Any] = {"start_at": start}
    if last is not None:
        bounds["end_at"] = last
    until_text = "" if last is None else f" to end_at {last.isoformat()}"
    note = (
        f"rrule {name} interval {interval} is elapsed time (redbeat stores dtstart as a "
        f"fixed UTC offset): from start_at {start.isoformat()}{until_text}"
    )
    return every(step, anchor=start), note, bounds


def _timestamp(value: Any, field_name: str) -> datetime | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidInput(f"rrule: {field_name} {value!r} is not Unix seconds")
    try:
        return datetime.fromtimestamp(value, UTC)
    except (OverflowError, OSError, ValueError) as exc:
        raise InvalidInput(f"rrule: {field_name} {value!r} is out of range") from exc


def _keep_stored_phase(store: ScheduleStore, candidate: Candidate) -> Candidate:
    """An interval whose stored ``every`` has the same interval and phase keeps the stored
    anchor: redbeat's last run moves on with each send, the fires do not."""
    spec = candidate.spec
    if spec is None or not isinstance(spec.schedule, Every) or spec.schedule.anchor == EPOCH:
        return candidate
    current = stored(store, spec.name)
    old = None if current is None else current.schedule
    new = spec.schedule
    if not isinstance(old, Every) or (old.interval, old.jitter) != (new.interval, new.jitter):
        return candidate
    if (new.anchor - old.anchor) % timedelta(seconds=new.interval):
        return candidate
    return dataclasses.replace(candidate, spec=dataclasses.replace(spec, schedule=old))


__all__ = [
    "DEFAULT_PREFIX",
    "RawEntry",
    "RedbeatSchedule",
    "RedbeatUnavailable",
    "import_redbeat",
    "key_prefix_of",
    "read_redbeat",
    "redis_url_of",
]
