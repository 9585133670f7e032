"""Calendars stored in the database (``{prefix}calendar_days``: one row per date).

A calendar exists while it has a date. Schedules name them in ``skip_on``
(:mod:`celery_gaffer.schedules.calendars`); these functions read and write their dates.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from datetime import date
from typing import Any

from sqlalchemy import Connection, delete, select
from sqlalchemy.dialects import postgresql, sqlite

from .arrays import on_postgresql
from .models import Models, table_of


def load_calendars(
    conn: Connection, models: Models, names: Iterable[str] | None = None
) -> dict[str, frozenset[date]]:
    """Each stored calendar's dates, by name (only ``names``, when given)."""
    days = models.CalendarDay
    stmt = select(days.calendar, days.day)
    if names is not None:
        wanted = sorted(set(names))
        if not wanted:
            return {}
        stmt = stmt.where(days.calendar.in_(wanted))
    found: dict[str, set[date]] = {}
    for name, day in conn.execute(stmt):
        found.setdefault(name, set()).add(day)
    return {name: frozenset(dates) for name, dates in found.items()}


def loader(conn: Connection, models: Models) -> Callable[[], Mapping[str, frozenset[date]]]:
    """A function giving every stored calendar, read by its first call only (one read for
    all the schedules of a call or chunk)."""
    found: list[dict[str, frozenset[date]]] = []

    def load() -> Mapping[str, frozenset[date]]:
        if not found:
            found.append(load_calendars(conn, models))
        return found[0]

    return load


def add_days(conn: Connection, models: Models, name: str, days: Iterable[date]) -> list[date]:
    """Add ``days`` to ``name`` (made by its first date); the dates that were new (a date
    another transaction added meanwhile is left as it is, not reported)."""
    have = load_calendars(conn, models, [name]).get(name, frozenset())
    new = sorted(set(days) - have)
    if not new:
        return []
    table = table_of(models.CalendarDay)
    insert = postgresql.insert if on_postgresql(conn) else sqlite.insert
    stmt = insert(table).on_conflict_do_nothing().returning(table.c.day)
    added = conn.execute(stmt, [{"calendar": name, "day": d} for d in new]).scalars()
    return sorted(added)


def remove_days(
    conn: Connection, models: Models, name: str, days: Iterable[date] | None = None
) -> list[date]:
    """Remove ``days`` from ``name`` (None: every date, the calendar itself); the dates
    removed."""
    have = load_calendars(conn, models, [name]).get(name, frozenset())
    gone = sorted(have if days is None else have & set(days))
    table = table_of(models.CalendarDay)
    stmt: Any = delete(table).where(table.c.calendar == name)
    if days is not None:
        stmt = stmt.where(table.c.day.in_(gone))
    if gone:
        conn.execute(stmt)
    return gone


def naming_schedules(conn: Connection, models: Models, name: str) -> list[str]:
    """The schedules whose ``skip_on`` names the stored calendar ``name``."""
    table = table_of(models.Schedule)
    found = []
    rows = conn.execute(select(table.c.name, table.c.skip_on).where(table.c.skip_on.is_not(None)))
    for schedule, skip_on in rows:
        if isinstance(skip_on, list) and name in skip_on:
            found.append(schedule)
    return sorted(found)
