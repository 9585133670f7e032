"""The lines of ``gaffer status``, written as the survey streams them.

Nothing holds every schedule: lines go out :data:`BATCH` at a time, and the text
table's column widths are measured on its first batch. What many schedules share (a
timing's next fire, a late fire's reason) is formatted once: tenants' schedules share a
few timings.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime, tzinfo
from typing import Any, TypeVar

import click

from ..beat.health import Health as Report
from ..beat.survey import reason, zone_shown
from ..protocol import Health
from .base import COLUMN_WIDTH, LINE_LIMIT, cell_text, iso
from .times import when

HEADER = ("SCHEDULE", "STATE", "LAST SUCCESS", "NEXT RUN", "FAILURES", "REASON")
#: Lines written at once (one write, not one a schedule); the text table's column widths
#: are those of its first batch.
BATCH = 1000
# Distinct formatted values kept (the memo starts again when full).
_MEMO_LIMIT = 10_000
# A schedule's definition is longer than this only when edited by hand: not kept.
_KEPT_DEFINITION = 1024

Row = TypeVar("Row")


@dataclass
class Tally:
    """What a status run has seen: schedules, lines shown, and whether any alerts."""

    total: int = 0
    shown: int = 0
    alerting: bool = False

    def count(
        self, surveyed: Iterable[tuple[Row, Report]], problems: bool
    ) -> Iterator[tuple[Row, Report]]:
        """``surveyed`` counted, without the ``ok`` ones when ``problems``."""
        for row, health in surveyed:
            self.total += 1
            self.alerting = self.alerting or health.alerting
            if problems and health.state == Health.OK:
                continue
            self.shown += 1
            yield row, health


@dataclass
class Formats:
    """Times and reasons as ``status`` shows them, each distinct one formatted once."""

    in_utc: bool = False
    _seen: dict[Any, Any] = field(default_factory=dict)
    _zones: dict[str, tzinfo | None] = field(default_factory=dict)
    # By the identity of a Health that rows deciding alike share (kept with it, so that
    # an identity is never taken for another's): what its lines show but the name and
    # last success.
    _shared: dict[Any, tuple[Any, ...]] = field(default_factory=dict)

    def _once(self, key: Any, make: Any, *args: Any) -> Any:
        found = self._seen.get(key)
        if found is None:
            if len(self._seen) >= _MEMO_LIMIT:
                self._seen.clear()
            found = self._seen[key] = make(*args)
        return found

    def _zone(self, definition: Any) -> tzinfo | None:
        try:
            return self._zones[definition]
        except (KeyError, TypeError):  # not seen yet, or not text
            zone = zone_shown(definition)
            if isinstance(definition, str) and len(definition) <= _KEPT_DEFINITION:
                if len(self._zones) >= _MEMO_LIMIT:
                    self._zones.clear()
                self._zones[definition] = zone
            return zone

    def json_line(self, health: Report) -> str:
        """A schedule's line of ``status --json``: :func:`status_json` as ``json.dumps``
        writes it."""
        return self.json_of(health.schedule, health.last_success_at, health)

    def json_of(self, name: str, last: datetime | None, health: Report) -> str:
        """:meth:`json_line` of schedule ``name`` last successful at ``last``, the rest
        from ``health`` (which may be another schedule's that decided alike). What
        follows the last success is the same for every schedule of one timing and
        state, so it is encoded once."""
        shared = self._shared.get(("json", id(health)))
        if shared is None or shared[0] is not health:
            tail_key = ("json", health.state, health.next_fire_at, health.consecutive_failures,
                        health.due_nominal_at, health.error)  # fmt: skip
            state = f', "state": {_ENCODE(str(health.state))}, "last_success_at": '
            tail = self._once(tail_key, _json_tail, health)
            shared = self._share(("json", id(health)), health, state, tail)
        _, state, tail = shared
        last_text = "null" if last is None else _ENCODE(last.isoformat())
        return f'{{"schedule": {_ENCODE(name)}{state}{last_text}{tail}'

    def cells(self, row: Mapping[Any, Any], health: Report) -> tuple[str, ...]:
        """A schedule's cells of the text table, its times in its zone (unless in UTC),
        each made printable as :func:`~.base.table` makes its cells."""
        return self.cells_of(health.schedule, health.last_success_at, row["schedule"], health)

    def cells_of(
        self, name: str, last: datetime | None, definition: Any, health: Report
    ) -> tuple[str, ...]:
        """:meth:`cells` of schedule ``name`` (its definition as stored) last successful
        at ``last``, the rest from ``health`` (which may be another schedule's)."""
        try:
            shared = self._shared.get((id(health), definition))
        except TypeError:  # a definition that is not text
            shared = None
        if shared is None or shared[0] is not health:
            zone = None if self.in_utc else self._zone(definition)
            following = self._once(
                ("when", health.next_fire_at, zone), when, health.next_fire_at, zone
            )
            if health.state == Health.OK:
                why = ""
            else:
                why = self._once(_reason_key(health, zone), reason, health, zone)
            cells = (str(health.state), following, str(health.consecutive_failures))
            shared = (health, zone, *cells, _printable(why, None))
            if isinstance(definition, str) and len(definition) <= _KEPT_DEFINITION:
                self._share((id(health), definition), *shared)
        _, zone, state, following, failures, why = shared
        return (
            _printable(name, COLUMN_WIDTH),
            state,
            "-" if last is None else when(last, zone),
            following,
            failures,
            why,
        )

    def _share(self, key: Any, *shared: Any) -> tuple[Any, ...]:
        if len(self._shared) >= _MEMO_LIMIT:
            self._shared.clear()
        self._shared[key] = shared
        return shared


def status_json(health: Report) -> dict[str, Any]:
    """A schedule's ``status --json`` object (its keys and their order are stable)."""
    late = health.state == Health.LATE
    return {
        "schedule": health.schedule,
        "state": health.state,
        "last_success_at": iso(health.last_success_at),
        "next_fire_at": iso(health.next_fire_at),
        "consecutive_failures": health.consecutive_failures,
        "late_since": iso(health.due_nominal_at) if late else None,
        "error": health.error,
        "reason": health.reason,
    }


def _json_tail(health: Report) -> str:
    # The line after "last_success_at"'s value: json.dumps's own separators and order.
    whole = json.dumps(status_json(health))
    return whole[whole.index(', "next_fire_at": ') :]


# Encodes one string as json.dumps does (the encoder's shortcut for a str).
_ENCODE = json.JSONEncoder().encode


def _reason_key(health: Report, zone: tzinfo | None) -> tuple[Any, ...]:
    # What a reason is made of: never the schedule's name.
    return ("reason", health.state, health.due_nominal_at, health.consecutive_failures,
            health.error, zone)  # fmt: skip


def _printable(text: str, limit: int | None) -> str:
    # Most cells need no escaping nor cutting: test that in C first.
    if text.isprintable() and len(text) <= (LINE_LIMIT if limit is None else limit):
        return text
    return cell_text(text, limit)


def table_lines(rows: Iterable[tuple[str, ...]]) -> Iterator[str]:
    """The status table's lines, as :func:`~.base.table` lays them out (the last column
    wide) for the header and the first :data:`BATCH` rows; a later, longer cell widens
    only its own line."""
    remaining = iter(rows)
    first = [HEADER, *itertools.islice(remaining, BATCH)]
    widths = [max(len(row[i]) for row in first) for i in range(len(HEADER) - 1)]
    # Each cell left-aligned and padded to its width (a longer one is not cut), as
    # str.ljust pads it; the last as it is.
    line = "  ".join([*(f"{{:<{width}}}" for width in widths), "{}"]).format
    for row in itertools.chain(first, remaining):
        yield line(*row).rstrip()


def echo_batches(lines: Iterable[str]) -> None:
    """Echo ``lines``, :data:`BATCH` at a time (a write a line is slow at a million)."""
    remaining = iter(lines)
    while batch := list(itertools.islice(remaining, BATCH)):
        click.echo("\n".join(batch))
