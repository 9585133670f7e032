"""``ScheduleStore``'s calendar methods: the calendars stored in the database.

A stored calendar is a named set of dates that schedules name in
``gaffer={"skip_on": [...]}`` (:mod:`celery_gaffer.schedules.calendars`). Each change is
written to the audit log (action ``calendar_add`` / ``calendar_remove``, no schedule) in
its own transaction.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import date, datetime
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection

from .beat.plan import bounds_with_stored, with_checked_calendars
from .exceptions import InvalidInput
from .schedules import watermarks
from .schedules.calendars import NoFireSurvives, validate_calendar_name
from .schedules.spec import ScheduleSpec
from .store import calendars as stored
from .store import schedules as rows
from .store.audit import record

if TYPE_CHECKING:
    from .schedule_reads import ScheduleReads

    _Base = ScheduleReads
else:
    _Base = object

#: Most dates one call adds or removes.
MAX_DAYS = 10_000


def calendar_days(days: Any, field_name: str = "days") -> list[date]:
    """``days`` (dates, or ISO 8601 ``YYYY-MM-DD`` text) checked, in order, no repeats."""
    if isinstance(days, (str, date)) or not isinstance(days, Iterable):
        raise InvalidInput(f"{field_name}: expected a list of dates", field=field_name)
    found: list[date] = []
    for day in days:
        if isinstance(day, str):
            try:
                day = date.fromisoformat(day)
            except ValueError:
                raise InvalidInput(
                    f"{field_name}: {day!r} is not a date (YYYY-MM-DD)", field=field_name
                ) from None
        if isinstance(day, datetime) or not isinstance(day, date):
            raise InvalidInput(f"{field_name}: {day!r} is not a date", field=field_name)
        if day not in found:
            found.append(day)
        if len(found) > MAX_DAYS:
            raise InvalidInput(f"{field_name}: more than {MAX_DAYS} dates", field=field_name)
    return sorted(found)


class CalendarMethods(_Base):
    """The calendar half of ``ScheduleStore``."""

    def calendars(self) -> dict[str, list[date]]:
        """Every stored calendar's dates, ascending, by name."""
        with self.database.autocommit() as conn:
            found = stored.load_calendars(conn, self.database.models)
        return {name: sorted(found[name]) for name in sorted(found)}

    def add_calendar(
        self, name: str, days: Iterable[date | str], *, note: str | None = None
    ) -> list[date]:
        """Add ``days`` to the stored calendar ``name`` (made if new); returns the dates
        that were not in it already. GafferError naming ``name`` or ``days``."""
        name = validate_calendar_name(name)
        checked = calendar_days(days)
        if not checked:
            raise InvalidInput("days: give at least one date", field="days")
        now = self._clock()
        with self.database.begin() as conn:
            added = stored.add_days(conn, self.database.models, name, checked)
            if added:
                changes: dict[str, list[Any]] = {
                    "calendar": [None, name],
                    "days": [None, _iso(added)],
                }
                record(conn, self.database.models, self.audit_actor, "calendar_add", None, now,
                       note=note, changes=changes)  # fmt: skip
                self._refresh_naming(conn, name)
        return added

    def remove_calendar(
        self, name: str, days: Iterable[date | str] | None = None, *, note: str | None = None
    ) -> list[date]:
        """Remove ``days`` from ``name``, or (``days`` None) the whole calendar, refused
        while a schedule names it in ``skip_on``; returns the dates removed. GafferError
        naming ``name`` when there is no such calendar (or it is in use)."""
        name = validate_calendar_name(name)
        checked = None if days is None else calendar_days(days)
        now = self._clock()
        models = self.database.models
        with self.database.begin() as conn:
            have = stored.load_calendars(conn, models, [name]).get(name)
            if have is None:
                raise InvalidInput(f"name: no stored calendar named {name!r}", field="name")
            if checked is None or not (have - set(checked)):
                users = stored.naming_schedules(conn, models, name)
                if users:
                    raise InvalidInput(
                        f"name: calendar {name!r} is named in skip_on by {', '.join(users[:5])}"
                        f"{' ...' if len(users) > 5 else ''}: change them first",
                        field="name",
                    )
            gone = stored.remove_days(conn, models, name, checked)
            if gone:
                changes: dict[str, list[Any]] = {
                    "calendar": [name, None if checked is None else name],
                    "days": [_iso(gone), None],
                }
                record(conn, models, self.audit_actor, "calendar_remove", None, now,
                       note=note, changes=changes)  # fmt: skip
                self._refresh_naming(conn, name)
        return gone

    def _refresh_naming(self, conn: Connection, name: str) -> None:
        """Recompute, with the calendars as now stored, the next fire of each schedule
        that names ``name`` (Beat claims a schedule by its next fire, so it sees the
        change on its next tick)."""
        models = self.database.models
        calendars = stored.loader(conn, models)
        for schedule in stored.naming_schedules(conn, models, name):
            current = rows.read_schedule(conn, models, schedule, lock=True)
            if current is None or current.schedule is None or current.error is not None:
                continue
            if not current.enabled:
                continue  # paused: no next fire until resumed
            bounds = bounds_with_stored(current.policy.bounds, calendars)
            try:
                next_fire_at = watermarks.first_fire(
                    current.schedule, bounds, current.watermark_at, current.fired_count
                )
            except NoFireSurvives as exc:
                raise InvalidInput(f"days: schedule {schedule!r}: {exc}", field="days") from None
            values = {"next_fire_at": next_fire_at, "check_at": next_fire_at}
            rows.update_schedule(conn, models, schedule, values)

    def _with_calendars(self, conn: Connection, spec: ScheduleSpec) -> ScheduleSpec:
        """``spec`` with its stored calendars' dates (a GafferError naming
        ``gaffer.skip_on`` when one does not exist, or when no fire survives them)."""
        load = lambda: stored.load_calendars(conn, self.database.models)  # noqa: E731
        return with_checked_calendars(spec, load, self._clock())


def _iso(days: Iterable[date]) -> list[str]:
    return [day.isoformat() for day in days]


__all__ = ["MAX_DAYS", "CalendarMethods", "calendar_days"]
