"""The console's overview (``/`` and ``GET /api/overview``): schedules counted by state,
the Beats and how far behind each is, fires and runs per minute over the last hour and
day, and the next clock change among the zones the cron schedules use.

The schedules are counted by one ``GROUP BY`` over small columns of every row
(:mod:`celery_gaffer.store.overview`): a scan, so the count is kept
:data:`COUNTS_TTL` seconds and then made again on a thread while the kept one is shown
(only a console's first overview waits for it); the zones in use, a scan of the JSON
definitions, likewise every :data:`ZONES_TTL` seconds. A row whose stored health word
no longer holds (its ``check_at`` had passed when counted, and Beat has not re-checked
it) is evaluated live by Beat's rules, the first :data:`STALE_EVALUATED` of them; past
those, when no Beat is running they count as ``late`` (their next fire's grace has
expired with no Beat to send it), else under their stored word (a running Beat
re-checks them within a few ticks); ``estimated`` says how many. The charts' counts
per minute are kept too (:mod:`.activity`).
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Connection
from sqlalchemy.exc import SQLAlchemyError
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from ..beat.health import evaluate_safely
from ..exceptions import GafferError
from ..protocol import Health
from ..schedules.clock_changes import ClockChange, clock_changes, offset_text
from ..schedules.cron_engine import load_zone
from ..schedules.explain import RULE_TEXT, Rule
from ..store import beats as registry
from ..store import overview as queries
from ..store.console import STATES
from .activity import CHART_COLOURS, CHART_HEIGHT, CHART_WIDTH, MinuteCounts, Series, charts
from .console import BEAT_SILENCE, Console
from .pages import console_of, render
from .present import iso
from .refreshed import Refreshed

logger = logging.getLogger("celery_gaffer.web")

#: Seconds without a tick from any Beat after which the console says no Beat is running.
BEAT_QUIET = BEAT_SILENCE.total_seconds()
#: Stale rows evaluated live at most, per overview.
STALE_EVALUATED = 20
#: Seconds the zones in use are kept before they are read again.
ZONES_TTL = 300
#: Seconds the schedules' count by stored state is kept before it is read again.
COUNTS_TTL = 10
#: How far ahead the next clock change is looked for.
CLOCK_HORIZON = timedelta(days=400)


@dataclass(frozen=True, slots=True)
class BeatLine:
    """A registered Beat and how long ago it last ticked."""

    name: str
    host: str
    pid: int
    started_at: datetime
    last_tick_at: datetime
    behind: float

    @property
    def quiet(self) -> bool:
        return self.behind > BEAT_QUIET

    def as_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "host": self.host,
            "pid": self.pid,
            "started_at": iso(self.started_at),
            "last_tick_at": iso(self.last_tick_at),
            "behind_seconds": round(self.behind, 3),
        }


@dataclass(frozen=True, slots=True)
class Overview:
    counts: dict[str, int]
    #: Schedules counted without a live evaluation (see the module's docstring).
    estimated: int
    #: When the schedules were counted (at most :data:`COUNTS_TTL` seconds ago).
    counted_at: datetime
    beats: list[BeatLine]
    beat_down: bool
    hour: Series
    day: Series
    clock_change: dict[str, Any] | None
    zones: list[str] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        return {
            "counts": self.counts,
            "beats": [beat.as_json() for beat in self.beats],
            "next_clock_change": self.clock_change,
            "beat_down": self.beat_down,
            "beat_quiet_seconds": BEAT_QUIET,
            "estimated": self.estimated,
            "counted_at": iso(self.counted_at),
            "series": {"hour": self.hour.as_json(), "day": self.day.as_json()},
        }


def _zones(console: Console, now: datetime) -> list[str]:
    with console.database.read() as conn:
        return queries.cron_zones(conn, console.database.models)


def _state_counts(console: Console, now: datetime) -> dict[tuple[str, bool], int]:
    with console.database.read() as conn:
        return queries.state_counts(conn, console.database.models, now)


@dataclass(frozen=True, slots=True)
class Kept:
    """What one console process keeps between overviews: the zones in use, the
    schedules counted by stored state, and the last day's counts per minute."""

    background: bool = True
    zones: Refreshed[list[str]] = field(init=False)
    counts: Refreshed[dict[tuple[str, bool], int]] = field(init=False)
    minutes: MinuteCounts = field(default_factory=MinuteCounts)

    def __post_init__(self) -> None:
        background = self.background
        object.__setattr__(self, "zones", Refreshed(_zones, ZONES_TTL, background=background))
        counts = Refreshed(_state_counts, COUNTS_TTL, background=background)
        object.__setattr__(self, "counts", counts)


def warm_up(console: Console, kept: Kept) -> threading.Thread:
    """Read the overview once on a thread of its own, as the console starts, so that the
    first overview asked for finds the counts, the zones and the day's runs read."""

    def read() -> None:
        try:
            read_overview(console, kept)
        except (GafferError, SQLAlchemyError) as exc:  # the first overview reads again
            logger.warning(
                "overview: the first read failed: %s",
                type(exc).__name__,
                extra={"action": "web_overview_read"},
            )

    thread = threading.Thread(target=read, name="gaffer-overview-warm-up", daemon=True)
    thread.start()
    return thread


def kept_of(request: Request) -> Kept:
    """The console's :class:`Kept`, made on its first overview."""
    state = request.app.state
    kept = getattr(state, "overview_kept", None)
    if not isinstance(kept, Kept):
        kept = state.overview_kept = Kept()
    return kept


def read_overview(console: Console, kept: Kept, *, stale_limit: int = STALE_EVALUATED) -> Overview:
    """Everything the overview shows, at the console's "now" (``stale_limit``: stale
    rows evaluated live at most)."""
    now = console.clock()
    models = console.database.models
    with console.database.read() as conn:
        found = [
            BeatLine(b.name, b.host, b.pid, b.started_at, b.last_tick_at, _behind(now, b))
            for b in registry.beats(conn, models)
        ]
        beat_down = beat_is_down(found)
    stored, counted_at = kept.counts.get(console, now)
    with console.database.read() as conn:
        counts, estimated = _counts(conn, console, stored, counted_at, beat_down, stale_limit)
    hour, day = charts(kept.minutes, console, now)
    in_use, _ = kept.zones.get(console, now)
    return Overview(
        counts,
        estimated,
        counted_at,
        found,
        beat_down,
        hour,
        day,
        next_clock_change(in_use, now),
        in_use,
    )


def beat_is_down(found: list[BeatLine]) -> bool:
    """No Beat has ticked in the last :data:`BEAT_QUIET` seconds (or none is registered)."""
    return all(beat.quiet for beat in found)


def _behind(now: datetime, beat: registry.BeatInfo) -> float:
    return max((now - beat.last_tick_at).total_seconds(), 0.0)


def _counts(
    conn: Connection,
    console: Console,
    stored: dict[tuple[str, bool], int],
    counted_at: datetime,
    beat_down: bool,
    stale_limit: int,
) -> tuple[dict[str, int], int]:
    """The counts by state word: ``stored`` (:func:`.queries.state_counts` at
    ``counted_at``) with its stale rows evaluated live, the first ``stale_limit`` of
    those that were stale then (a row stale since is counted at the next count)."""
    models = console.database.models
    now = console.clock()
    counts = dict.fromkeys(STATES, 0)
    stale_by_word: dict[str, int] = {}
    for (word, stale), number in stored.items():
        word = word if word in counts else str(Health.OK)
        if stale:
            stale_by_word[word] = stale_by_word.get(word, 0) + number
        else:
            counts[word] += number
    if not stale_by_word:
        return counts, 0
    for row in queries.stale_rows(conn, models, counted_at, stale_limit):
        health, _ = evaluate_safely(conn, models, row, now, console.database.settings)
        counts[health.state] = counts.get(health.state, 0) + 1
        was = row["health"] if row["health"] in counts else str(Health.OK)
        stale_by_word[was] = stale_by_word.get(was, 0) - 1
    estimated = 0
    for word, number in stale_by_word.items():
        if number <= 0:
            continue
        estimated += number
        counts[str(Health.LATE) if beat_down else word] += number
    return counts, estimated


def next_clock_change(zones: list[str], now: datetime) -> dict[str, Any] | None:
    """The earliest clock change after ``now`` among ``zones`` (within
    :data:`CLOCK_HORIZON`), with every zone that changes at that instant and what it
    does to the schedules; None when none of them changes."""
    found: list[tuple[str, ClockChange]] = []
    for name in zones:
        try:
            zone = load_zone(name)
        except ValueError:
            continue  # a zone this machine's tzdata does not know
        change = next(iter(clock_changes(zone, now, now + CLOCK_HORIZON)), None)
        if change is not None:
            found.append((name, change))
    if not found:
        return None
    at = min(change.at for _, change in found)
    first = [(name, change) for name, change in found if change.at == at]
    name, change = first[0]
    return {
        "at": iso(at),
        "zone": name,
        "zones": [zone for zone, _ in first],
        "kind": change.kind,
        "before_offset": offset_text(change.before),
        "after_offset": offset_text(change.after),
        "before_abbreviation": change.before_abbreviation,
        "after_abbreviation": change.after_abbreviation,
        "wall_from": change.wall_from.isoformat(),
        "wall_to": change.wall_to.isoformat(),
        "effect": clock_effect(change),
    }


def clock_effect(change: ClockChange) -> str:
    """What a clock change does to the schedules, in one sentence (docs/dst.md's rules)."""
    shift = abs(change.after - change.before)
    minutes = int(shift.total_seconds() // 60)
    amount = f"{minutes} minutes"
    if minutes % 60 == 0:
        amount = "1 hour" if minutes == 60 else f"{minutes // 60} hours"
    start, end = f"{change.wall_from:%H:%M}", f"{change.wall_to:%H:%M}"
    last = f"{change.wall_to - timedelta(minutes=1):%H:%M}"
    abbreviations = f"{change.before_abbreviation} → {change.after_abbreviation}"
    if change.kind == "gap":
        return (
            f"Clocks go forward {amount} at {start} ({abbreviations}): wall times "
            f"{start} to {last} do not happen; {RULE_TEXT[Rule.GAP_END]} ({end}); "
            f"{RULE_TEXT[Rule.EVERY_INSTANT]}; {RULE_TEXT[Rule.ELAPSED]}."
        )
    return (
        f"Clocks go back {amount} at {end} ({abbreviations}): wall times "
        f"{start} to {last} happen twice; {RULE_TEXT[Rule.FIRST_OCCURRENCE]}; "
        f"{RULE_TEXT[Rule.EVERY_INSTANT]}; {RULE_TEXT[Rule.ELAPSED]}."
    )


def page(request: Request) -> Response:
    """``/``: the overview page."""
    found = read_overview(console_of(request), kept_of(request))
    return render(
        request,
        "overview.html",
        title="Overview",
        section="overview",
        overview=found,
        beat_quiet=BEAT_QUIET,
        colours=CHART_COLOURS,
        chart_width=CHART_WIDTH,
        chart_height=CHART_HEIGHT,
    )


def api(request: Request) -> Response:
    """``GET /api/overview``."""
    return JSONResponse(read_overview(console_of(request), kept_of(request)).as_json())
