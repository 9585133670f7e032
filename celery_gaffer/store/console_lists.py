"""The console's lists of schedules and runs: filtered, sorted, paged both ways, counted.

Pages are keyset pages (never an ``OFFSET``): a page starts strictly after (or ends
strictly before) a cursor, the sort key of the row it follows. Schedules sort only by
indexed columns: ``name`` (unique index) and ``next_fire`` (``next_fire_at`` index, the
name breaking ties; schedules without a next fire last). State, task and last run have
no index, so the lists do not sort by them. Runs come newest first by id only (no index
on ``started_at`` or ``duration``).

Totals are capped counts: ``SELECT count(*) FROM (SELECT 1 ... LIMIT cap + 1)`` reads at
most ``cap + 1`` rows, so a total is exact up to :data:`COUNT_CAP` and "more than" beyond.
A filter on a column without an index (state, task, the name search, the zone, which
lives inside the schedule's JSON) could make a page or a count read every row when it
matches few. So such a page looks at no more than :data:`FILTER_SCAN` rows past its
cursor (:data:`ZONE_SCAN` with a zone) and, when they hold fewer matches than a page,
its "next" cursor goes on after them; such a count looks at :data:`COUNT_SCAN` rows and
is a floor ("at least") when there were more. A zone-filtered list is not counted.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Connection,
    FromClause,
    Select,
    Text,
    and_,
    cast,
    false,
    func,
    literal,
    or_,
    select,
    true,
)

from ..exceptions import InvalidInput
from ..protocol import Health
from .models import Models, table_of
from .schedule_rows import readable_columns

#: The state words a list of schedules can be filtered by.
STATES = tuple(str(state) for state in Health)
#: How a list of schedules can be sorted ("-" first: descending).
SORTS = ("name", "-name", "next_fire", "-next_fire")
#: Totals above this are shown as "more than COUNT_CAP".
COUNT_CAP = 10_000
#: Rows a count with a filter on a column without an index examines at most.
COUNT_SCAN = 20_000
#: Rows a page with a filter on a column without an index examines at most.
FILTER_SCAN = 20_000
#: Rows a page with a zone filter examines at most (each one's JSON is read).
ZONE_SCAN = 10_000
_ZONE = "zone_of_row"
# What the filters without an index read, and the keys of the two sorts.
_FILTER_COLUMNS = (
    "id",
    "name",
    "next_fire_at",
    "task",
    "source",
    "error",
    "enabled",
    "health",
    "check_at",
)


@dataclass(frozen=True, slots=True)
class ScheduleFilter:
    """What a list of schedules keeps; None keeps everything."""

    state: str | None = None
    search: str | None = None
    task: str | None = None
    zone: str | None = None
    source: str | None = None

    def as_query(self) -> dict[str, str]:
        """The filter as query parameters (``q`` for the search), without empty ones."""
        pairs = (
            ("state", self.state),
            ("task", self.task),
            ("zone", self.zone),
            ("source", self.source),
            ("q", self.search),
        )
        return {key: value for key, value in pairs if value}


@dataclass(frozen=True, slots=True)
class Cursor:
    """A position in a sorted list: the sort value (``next_fire_at`` for that sort) and
    the name of the row it is at."""

    name: str
    next_fire_at: datetime | None = None

    def encode(self, sort: str) -> str:
        if sort.lstrip("-") == "name":
            return self.name
        stamp = "" if self.next_fire_at is None else self.next_fire_at.isoformat()
        return f"{stamp}|{self.name}"

    @classmethod
    def parse(cls, text: str, sort: str, field: str) -> Cursor:
        if sort.lstrip("-") == "name":
            return cls(text)
        stamp, bar, name = text.partition("|")
        try:
            when = datetime.fromisoformat(stamp) if stamp else None
        except ValueError:
            when = None
            bar = ""
        if not bar or (when is not None and when.utcoffset() is None):
            raise InvalidInput(f"{field}: not a page cursor of this list", field=field)
        return cls(name, when)

    @classmethod
    def of(cls, row: Mapping[Any, Any]) -> Cursor:
        return cls(row["name"], row["next_fire_at"])


@dataclass(frozen=True, slots=True)
class Rows:
    """Rows of one page in the list's order; ``more``: rows follow them in the direction
    read; ``edge``: where the next read in that direction starts (the last row shown, or
    the end of a zone filter's window)."""

    rows: list[Mapping[Any, Any]]
    more: bool
    edge: Cursor | None
    window_full: bool = False


def schedule_rows(
    conn: Connection,
    models: Models,
    *,
    now: datetime,
    limit: int,
    sort: str = "name",
    where: ScheduleFilter = ScheduleFilter(),
    after: Cursor | None = None,
    backwards: bool = False,
    scan: int | None = None,
) -> Rows:
    """Up to ``limit`` schedule rows in ``sort`` order after ``after`` (or, ``backwards``,
    the ``limit`` rows before it, still returned in ``sort`` order).

    Rows carry every column, JSON as text. ``state`` keeps rows whose stored word is that
    one and the rows whose word is stale (the caller evaluates those live). A filter on
    a column without an index looks at the next ``scan`` rows only (default
    :data:`FILTER_SCAN`, :data:`ZONE_SCAN` with a zone): when they hold fewer matches
    than a page, ``edge`` is the last row looked at, where the next page goes on."""
    table = table_of(models.Schedule)
    descending = sort.startswith("-") != backwards
    by_fire = sort.lstrip("-") == "next_fire"
    order = _order(table, by_fire, descending)
    bounds: list[ColumnElement[bool]] = []
    if where.source:
        bounds.append(table.c.source == where.source)
    if after is not None:
        bounds.append(_past(table, after, by_fire=by_fire, descending=descending))
    shown = select(*readable_columns(table))
    if not (where.zone or where.state or where.search or where.task):
        stmt = shown.where(*bounds).order_by(*order).limit(limit + 1)
        return _rows(list(conn.execute(stmt).mappings()), limit, backwards)
    size = scan or (ZONE_SCAN if where.zone else FILTER_SCAN)
    looked_at: list[Any] = [table.c[name] for name in _FILTER_COLUMNS]
    if where.zone:
        looked_at.append(_zone_expr(table).label(_ZONE))
    window = select(*looked_at).where(*bounds).order_by(*order).limit(size).subquery()
    unindexed = ScheduleFilter(state=where.state, search=where.search, task=where.task)
    kept = _conditions(window, unindexed, now)
    if where.zone:
        kept.append(_zone_is(window.c[_ZONE], where.zone))
    matched = select(window.c.id).where(*kept).order_by(*_order(window, by_fire, descending))
    stmt = shown.where(table.c.id.in_(matched.limit(limit + 1))).order_by(*order)
    rows: list[Mapping[Any, Any]] = list(conn.execute(stmt).mappings())
    if len(rows) > limit:
        return _rows(rows, limit, backwards)
    # The window's last row, if it was full: the next page goes on after it.
    last_looked_at = (
        select(table.c.name, table.c.next_fire_at)
        .where(*bounds)
        .order_by(*order)
        .offset(size - 1)
        .limit(1)
    )
    end = conn.execute(last_looked_at).mappings().one_or_none()
    if end is None:
        return _rows(rows, limit, backwards)
    return Rows(rows[::-1] if backwards else rows, True, Cursor.of(end), window_full=True)


def _rows(rows: list[Mapping[Any, Any]], limit: int, backwards: bool) -> Rows:
    more = len(rows) > limit
    rows = rows[:limit]
    edge = Cursor.of(rows[-1]) if rows else None
    return Rows(rows[::-1] if backwards else rows, more, edge)


@dataclass(frozen=True, slots=True)
class Count:
    """A bounded count: ``value`` is exact when ``exact``, else a floor (only some rows
    were looked at); a value above the cap means "more than the cap" either way."""

    value: int
    exact: bool = True


def count_schedules(
    conn: Connection,
    models: Models,
    *,
    now: datetime,
    where: ScheduleFilter = ScheduleFilter(),
    sort: str = "name",
    before: Cursor | None = None,
    cap: int = COUNT_CAP,
    scan: int = COUNT_SCAN,
) -> Count:
    """How many rows the filter keeps (those before ``before`` in ``sort`` order only).

    Without a filter on a column that has no index (state, search, task), the count
    reads at most ``cap + 1`` index entries. With one, it looks at no more than ``scan``
    rows and counts the matches among them: exact when there were no more rows, else a
    floor. A zone filter is not counted."""
    table = table_of(models.Schedule)
    bounds: list[ColumnElement[bool]] = []
    if where.source:
        bounds.append(table.c.source == where.source)
    if before is not None:
        by_fire = sort.lstrip("-") == "next_fire"
        descending = not sort.startswith("-")
        bounds.append(_past(table, before, by_fire=by_fire, descending=descending))
    if not (where.state or where.search or where.task):
        capped = select(literal(1)).select_from(table).where(*bounds).limit(cap + 1).subquery()
        return Count(int(conn.execute(select(func.count()).select_from(capped)).scalar_one()))
    window = select(table).where(*bounds).limit(scan).subquery()
    kept = and_(true(), *_conditions(window, where, now))
    scanned, matched = conn.execute(
        select(func.count(), func.count().filter(kept)).select_from(window)
    ).one()
    return Count(int(matched), exact=int(scanned) < scan)


def run_rows(
    conn: Connection,
    models: Models,
    *,
    limit: int,
    state: str | None = None,
    schedule: str | None = None,
    past_id: int | None = None,
    backwards: bool = False,
) -> tuple[list[dict[str, Any]], bool]:
    """Up to ``limit`` runs newest first (after the run ``past_id``; ``backwards``: the
    ones before it, still newest first), each with ``schedule_definition`` (its
    schedule's stored definition as JSON text, None for an ad-hoc run or a removed
    schedule), and whether more follow in the direction read.

    The order follows the index the filter uses: nominal time for one schedule
    (``(schedule, nominal_at)``), last update for one state (``(state, updated_at)``),
    else the id; the id breaks ties.
    """
    runs = table_of(models.JobRun)
    schedules = table_of(models.Schedule)
    definition = cast(schedules.c.schedule, Text).label("schedule_definition")
    keys = _run_keys(runs, state, schedule)
    stmt = select(runs, definition).select_from(
        runs.outerjoin(schedules, schedules.c.name == runs.c.schedule)
    )
    stmt = _run_filter(stmt, runs, state, schedule)
    if past_id is not None:
        stmt = stmt.where(_run_past(runs, keys, past_id, newer=backwards))
    order = [key.asc() if backwards else key.desc() for key in keys]
    rows = [dict(row) for row in conn.execute(stmt.order_by(*order).limit(limit + 1)).mappings()]
    more = len(rows) > limit
    rows = rows[:limit]
    return (rows[::-1] if backwards else rows), more


def count_runs(
    conn: Connection,
    models: Models,
    *,
    state: str | None = None,
    schedule: str | None = None,
    newer_than_id: int | None = None,
    cap: int = COUNT_CAP,
) -> int:
    """How many runs the filter keeps (those listed before the run ``newer_than_id``
    only), at most ``cap + 1``."""
    runs = table_of(models.JobRun)
    keys = _run_keys(runs, state, schedule)
    stmt = _run_filter(select(literal(1)).select_from(runs), runs, state, schedule)
    if newer_than_id is not None:
        stmt = stmt.where(_run_past(runs, keys, newer_than_id, newer=True))
    # Ordered along the filter's index (its leading sort column: no tie-break sort), so
    # the planner reads that index rather than the table.
    capped = stmt.order_by(keys[0].desc()).limit(cap + 1).subquery()
    return int(conn.execute(select(func.count()).select_from(capped)).scalar_one())


def _run_keys(runs: FromClause, state: str | None, schedule: str | None) -> list[Any]:
    if schedule is not None:
        return [runs.c.nominal_at, runs.c.id]
    if state is not None:
        return [runs.c.updated_at, runs.c.id]
    return [runs.c.id]


def _run_filter(
    stmt: Select[Any], runs: FromClause, state: str | None, schedule: str | None
) -> Select[Any]:
    if state is not None:
        stmt = stmt.where(runs.c.state == state)
    if schedule is not None:
        stmt = stmt.where(runs.c.schedule == schedule)
    return stmt


def _run_past(runs: FromClause, keys: list[Any], run_id: int, *, newer: bool) -> Any:
    """Runs listed after the run ``run_id`` (``newer``: before it) in newest-first order."""
    if len(keys) == 1:
        return runs.c.id > run_id if newer else runs.c.id < run_id
    at = runs.alias("at_cursor")
    value = select(at.c[keys[0].name]).where(at.c.id == run_id).scalar_subquery()
    key = keys[0]
    if newer:
        return or_(key > value, and_(key == value, runs.c.id > run_id))
    return or_(key < value, and_(key == value, runs.c.id < run_id))


def _zone_expr(table: FromClause) -> ColumnElement[Any]:
    return func.coalesce(table.c.schedule["tz"].as_string(), "UTC")


def _zone_is(zone: ColumnElement[Any], wanted: str) -> ColumnElement[bool]:
    """The zone filter: the row's zone (:func:`_zone_expr`, no zone being "UTC") is
    ``wanted`` exactly ("UTC" does not match "Etc/UTC")."""
    return zone == wanted


def filter_conditions(
    table: FromClause, where: ScheduleFilter, now: datetime
) -> list[ColumnElement[bool]]:
    """Everything ``where`` keeps, its zone included, as conditions on ``table``'s
    columns: the rows the list shows (the list applies the same conditions in a bounded
    window), and those a bulk action over the filter selects."""
    kept = _conditions(table, where, now)
    if where.zone:
        kept.append(_zone_is(_zone_expr(table), where.zone))
    return kept


def _filtered(
    stmt: Select[Any], table: FromClause, where: ScheduleFilter, now: datetime
) -> Select[Any]:
    return stmt.select_from(table).where(*_conditions(table, where, now))


def _conditions(
    table: FromClause, where: ScheduleFilter, now: datetime
) -> list[ColumnElement[bool]]:
    """What ``where`` keeps (but its zone), as conditions on ``table``'s columns."""
    kept: list[ColumnElement[bool]] = []
    if where.search:
        # ILIKE on PostgreSQL: twice as fast as lower(name) LIKE, which icontains makes.
        pattern = "%" + re.sub(r"([/%_])", r"/\1", where.search) + "%"
        kept.append(table.c.name.ilike(pattern, escape="/"))
    if where.task:
        kept.append(table.c.task == where.task)
    if where.source:
        kept.append(table.c.source == where.source)
    state = where.state
    if state == Health.ERROR:
        kept.append(table.c.error.is_not(None))
    elif state == Health.PAUSED:
        kept.extend([table.c.error.is_(None), table.c.enabled.is_(false())])
    elif state is not None:
        kept.extend(
            [
                table.c.error.is_(None),
                table.c.enabled.is_(true()),
                or_(table.c.health == state, table.c.check_at <= now),
            ]
        )
    return kept


def _order(table: FromClause, by_fire: bool, descending: bool) -> Sequence[Any]:
    name = table.c.name.desc() if descending else table.c.name.asc()
    if not by_fire:
        return [name]
    # Ascending: schedules without a next fire last; descending: first (the reverse).
    fire = table.c.next_fire_at
    return [fire.desc().nulls_first() if descending else fire.asc().nulls_last(), name]


def _past(
    table: FromClause, cursor: Cursor, *, by_fire: bool, descending: bool
) -> ColumnElement[bool]:
    """Rows strictly after ``cursor`` in the order :func:`_order` gives."""
    name = table.c.name
    name_past = name < cursor.name if descending else name > cursor.name
    if not by_fire:
        return name_past
    fire = table.c.next_fire_at
    if cursor.next_fire_at is None:
        same = and_(fire.is_(None), name_past)
        return or_(same, fire.is_not(None)) if descending else same
    value = cursor.next_fire_at
    beyond = fire < value if descending else fire > value
    tied = and_(fire == value, name_past)
    return or_(beyond, tied) if descending else or_(beyond, tied, fire.is_(None))
