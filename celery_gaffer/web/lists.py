"""The console's lists of schedules and runs as pages: the query a page came from, its
rows, the links to the pages before and after it, and its place in the total.

Paging is by keyset (:mod:`celery_gaffer.store.console_lists`): ``after`` starts a page
after a row, ``before`` ends one before a row. Totals are exact up to
:data:`~celery_gaffer.store.console_lists.COUNT_CAP` and "more than" it beyond, so a
page costs the same at 1,000,000 schedules as at 100.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlencode

from ..exceptions import InvalidInput
from ..protocol import RunState
from ..store.console_lists import COUNT_CAP, SORTS, STATES, ScheduleFilter

__all__ = ["COUNT_CAP", "SCHEDULE_SOURCES", "SORTS", "Listing", "Span", "read_filter", "read_sort"]

#: Where schedules come from: the database (ScheduleStore, CLI, console) or Beat's config.
SCHEDULE_SOURCES = ("db", "config")
#: The largest row id (ids are signed 64-bit integers).
LARGEST_ID = 2**63 - 1


@dataclass(frozen=True, slots=True)
class Span:
    """Where a page sits in its list: ``shown`` rows after ``before`` others, of
    ``total``. A total past the cap is None ("more than" the cap); a position that is
    not known exactly is None ("50 shown")."""

    shown: int
    before: int | None
    total: int | None
    counted: bool = True
    #: The total is a floor: only some of the rows were counted.
    at_least: bool = False

    def summary(self) -> str:
        """``1-50 of 12,345`` (with an en dash), ``51-100 of more than 10,000``."""
        if self.shown == 0 and self.before in (0, None):
            return "Nothing matches" if self.total in (0, None) else "None on this page"
        if not self.counted:
            return f"{self.shown:,} shown (a zone filter is not counted)"
        total = f"{self.total:,}" if self.total is not None else f"more than {COUNT_CAP:,}"
        if self.at_least and self.total is not None:
            total = f"at least {self.total:,}"
        if self.before is None:
            return f"{self.shown:,} shown of {total}"
        first = self.before + 1
        return f"{first:,}\N{EN DASH}{self.before + self.shown:,} of {total}"


@dataclass(frozen=True, slots=True)
class Listing:
    """A page's query as links carry it: the filter, the sort and the cursor."""

    path: str
    query: Mapping[str, str]
    sort: str
    default_sort: str

    def url(self, **changes: str | None) -> str:
        """This list's URL with ``changes`` (None drops a parameter); the default sort
        and empty values are left out."""
        merged = {**self.query, "sort": self.sort, **changes}
        if merged.get("sort") == self.default_sort:
            merged.pop("sort")
        kept = {key: value for key, value in merged.items() if value}
        return self.path + ("?" + urlencode(kept) if kept else "")

    def sorted_by(self, column: str) -> str:
        """The URL sorting by ``column``: ascending, or descending when it already is."""
        sort = f"-{column}" if self.sort == column else column
        return self.url(sort=sort, after=None, before=None)

    def direction(self, column: str) -> str:
        """``ascending``/``descending`` when sorted by ``column``, else ``none`` (for
        ``aria-sort``)."""
        if self.sort == column:
            return "ascending"
        if self.sort == f"-{column}":
            return "descending"
        return "none"


def read_filter(params: Mapping[str, str]) -> ScheduleFilter:
    """A schedules filter from query parameters; InvalidInput names a bad one."""
    state = params.get("state") or None
    if state is not None and state not in STATES:
        raise InvalidInput(f"state: expected one of {', '.join(STATES)}", field="state")
    source = params.get("source") or None
    return ScheduleFilter(
        state=state,
        search=params.get("q") or None,
        task=params.get("task") or None,
        zone=params.get("zone") or None,
        source=source,
    )


def read_sort(params: Mapping[str, str], default: str = "name") -> str:
    sort = params.get("sort") or default
    if sort not in SORTS:
        raise InvalidInput(f"sort: expected one of {', '.join(SORTS)}", field="sort")
    return sort


def read_run_state(params: Mapping[str, str]) -> str | None:
    state = params.get("state") or None
    if state is not None and state not in {str(s) for s in RunState}:
        raise InvalidInput(f"state: expected one of {', '.join(RunState)}", field="state")
    return state


def read_run_cursor(params: Mapping[str, str], field: str) -> int | None:
    return read_whole(params, field, what="a run id")


def ascii_whole(text: str) -> int | None:
    """``text`` as a whole number when it is ASCII digits only (not '²' or '١٢', which
    ``str.isdigit`` accepts and ``int`` refuses or reads), else None."""
    if not (text.isascii() and text.isdigit() and len(text) <= 40):
        return None
    return int(text)


def read_whole(
    params: Mapping[str, str], field: str, *, most: int = LARGEST_ID, what: str = ""
) -> int | None:
    """The query's ``field`` as a whole number from 1 to ``most`` (a row id at most
    :data:`LARGEST_ID`, the largest signed 64-bit integer); None when it is absent or empty.
    InvalidInput naming the field for anything else."""
    text = params.get(field) or None
    if text is None:
        return None
    number = ascii_whole(text)
    if number is None or not 1 <= number <= most:
        expected = what or "a whole number"
        raise InvalidInput(f"{field}: expected {expected} from 1 to {most}", field=field)
    return number
