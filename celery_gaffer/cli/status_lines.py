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
from datetime import tzinfo
from typing import Any

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


@dataclass
class Tally:
    """What a status run has seen: schedules, lines shown, and whether any alerts."""

    total: int = 0
    shown: int = 0
    alerting: bool = False

    def count(
        self, surveyed: Iterable[tuple[Mapping[Any, Any], Report]], problems: bool
    ) -> Iterator[tuple[Mapping[Any, Any], Report]]:
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
        writes it. What follows the last success is the same for every schedule of one
        timing and state, so it is encoded once."""
        last = health.last_success_at
        tail_key = ("json", health.state, health.next_fire_at, health.consecutive_failures,
                    health.due_nominal_at, health.error)  # fmt: skip
        tail: str = self._once(tail_key, _json_tail, health)
        return (
            f'{{"schedule": {_ENCODE(health.schedule)}, "state": {_ENCODE(str(health.state))},'
            f' "last_success_at": {"null" if last is None else _ENCODE(last.isoformat())}{tail}'
        )

    def cells(self, row: Mapping[Any, Any], health: Report) -> tuple[str, ...]:
        """A schedule's cells of the text table, its times in its zone (unless in UTC),
        each made printable as :func:`~.base.table` makes its cells."""
        zone = None if self.in_utc else self._zone(row["schedule"])
        following = self._once(("when", health.next_fire_at, zone), when, health.next_fire_at, zone)
        if health.state == Health.OK:
            why = ""
        else:
            why = self._once(_reason_key(health, zone), reason, health, zone)
        return (
            _printable(health.schedule, COLUMN_WIDTH),
            str(health.state),
            when(health.last_success_at, zone),
            following,
            str(health.consecutive_failures),
            _printable(why, None),
        )


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
    for row in itertools.chain(first, remaining):
        padded = [cell.ljust(width) for cell, width in zip(row, widths, strict=False)]
        yield "  ".join([*padded, row[-1]]).rstrip()


def echo_batches(lines: Iterable[str]) -> None:
    """Echo ``lines``, :data:`BATCH` at a time (a write a line is slow at a million)."""
    remaining = iter(lines)
    while batch := list(itertools.islice(remaining, BATCH)):
        click.echo("\n".join(batch))
