"""Fires and runs per minute for the overview's charts, and the charts themselves
(inline SVG, drawn on the server).

The runs are counted by the state they ended in (the runs' ``(state, updated_at)``
index), the fires by when they were written to the ledger (its ``created_at`` index),
per minute, grouped by the database (:mod:`celery_gaffer.store.overview`). A minute
that has passed keeps its counts, so each console process keeps the last day's minutes
(:class:`MinuteCounts`) and reads again only the minutes from :data:`SETTLE` minutes
before its last read: a request after the first reads a few minutes of rows, not a
day's. (A run's row that changes state again once it ended would be counted under its
old state until the console restarts or the minute leaves the day.)
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ..protocol import RunState
from ..store import overview as queries
from .console import Console
from .present import iso

#: The run states the charts count, in the order they are stacked.
CHART_STATES = (RunState.SUCCEEDED, RunState.FAILED, RunState.SKIPPED, RunState.DUPLICATE)
#: Fill of each state's bars, and of the fires' line.
CHART_COLOURS = {
    "succeeded": "#2e7d32",
    "failed": "#c62828",
    "skipped": "#b26a00",
    "duplicate": "#5f6b7a",
    "fires": "#2f6fb3",
}
CHART_WIDTH, CHART_HEIGHT = 600, 80
#: The charts: the last hour per minute, the last day per 15 minutes.
HOUR = ("Last hour", 60, 60)
DAY = ("Last day", 15 * 60, 96)
#: Minutes before the last read that are read again (rows committed late: a run's
#: ``updated_at`` is set before its transaction commits).
SETTLE = 2


@dataclass(frozen=True, slots=True)
class Series:
    """Fires and runs counted per bucket of ``bucket`` seconds, the oldest first."""

    title: str
    bucket: int
    start: datetime
    fires: list[int]
    runs: dict[str, list[int]]

    @property
    def totals(self) -> dict[str, int]:
        return {"fires": sum(self.fires), **{state: sum(n) for state, n in self.runs.items()}}

    @property
    def label(self) -> str:
        totals = self.totals
        runs = ", ".join(f"{totals[state]} {state}" for state in self.runs)
        return f"{self.title}: {totals['fires']} fires; runs: {runs}"

    def bars(self) -> list[dict[str, Any]]:
        """The runs as stacked bars: one SVG rectangle per state and bucket with runs."""
        scale, width = self._scale()
        shapes: list[dict[str, Any]] = []
        for index in range(len(self.fires)):
            top = float(CHART_HEIGHT)
            for state, counts in self.runs.items():
                height = counts[index] * scale
                if height <= 0:
                    continue
                top -= height
                shapes.append(
                    {
                        "x": round(index * width, 2),
                        "y": round(top, 2),
                        "width": round(max(width - 1, 1), 2),
                        "height": round(height, 2),
                        "fill": CHART_COLOURS[state],
                    }
                )
        return shapes

    def fire_points(self) -> str:
        """The fires as the points of an SVG polyline, one a bucket."""
        scale, width = self._scale()
        return " ".join(
            f"{round((index + 0.5) * width, 2)},{round(CHART_HEIGHT - number * scale, 2)}"
            for index, number in enumerate(self.fires)
        )

    def _scale(self) -> tuple[float, float]:
        """Pixels a count, and a bucket's width."""
        stacked = [sum(column) for column in zip(*self.runs.values(), strict=True)]
        tallest = max([*self.fires, *stacked], default=0)
        scale = (CHART_HEIGHT - 2) / tallest if tallest else 0.0
        return scale, CHART_WIDTH / len(self.fires) if self.fires else 0.0

    def as_json(self) -> dict[str, Any]:
        return {
            "start": iso(self.start),
            "bucket_seconds": self.bucket,
            "fires": self.fires,
            "runs": self.runs,
            "totals": self.totals,
        }


class MinuteCounts:
    """The last day's runs by ``(state, minute)`` and fires by minute, kept between
    requests: each read asks the database only for the minutes since the last one."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._runs: dict[tuple[str, int], int] = {}
        self._fires: dict[int, int] = {}
        self._read_through: int | None = None

    def read(
        self, console: Console, now: datetime
    ) -> tuple[dict[tuple[str, int], int], dict[int, int]]:
        """The counts from the day chart's first minute to ``now``."""
        first = queries.minute_of(bucket_start(now, DAY[1], DAY[2]))
        current = queries.minute_of(now)
        with self._lock:
            known = self._read_through
            start = first if known is None or known < first else min(known - SETTLE, current)
            database = console.database
            since = datetime.fromtimestamp(start * queries.MINUTE, tz=now.tzinfo)
            with database.read() as conn:
                states = [str(state) for state in CHART_STATES]
                runs = queries.run_series(conn, database.models, states, since)
                fires = queries.fire_series(conn, database.models, since)
            kept_runs = {k: n for k, n in self._runs.items() if first <= k[1] < start}
            kept_fires = {m: n for m, n in self._fires.items() if first <= m < start}
            self._runs = {**kept_runs, **runs}
            self._fires = {**kept_fires, **fires}
            self._read_through = current
            return dict(self._runs), dict(self._fires)


def charts(counts: MinuteCounts, console: Console, now: datetime) -> tuple[Series, Series]:
    """The hour's and the day's series at ``now``."""
    runs, fires = counts.read(console, now)
    return series(*HOUR, now, runs, fires), series(*DAY, now, runs, fires)


def bucket_start(now: datetime, bucket: int, count: int) -> datetime:
    minute = queries.minute_of(now) * 60
    last = minute - minute % bucket
    return datetime.fromtimestamp(last - (count - 1) * bucket, tz=now.tzinfo)


def series(
    title: str,
    bucket: int,
    count: int,
    now: datetime,
    runs: dict[tuple[str, int], int],
    fires: dict[int, int],
) -> Series:
    start = bucket_start(now, bucket, count)
    first = queries.minute_of(start)
    per = bucket // 60

    def index(minute: int) -> int | None:
        offset = (minute - first) // per
        return offset if 0 <= offset < count else None

    fire_counts = [0] * count
    for minute, number in fires.items():
        at = index(minute)
        if at is not None:
            fire_counts[at] += number
    run_counts = {str(state): [0] * count for state in CHART_STATES}
    for (state, minute), number in runs.items():
        at = index(minute)
        if at is not None and state in run_counts:
            run_counts[state][at] += number
    return Series(title, bucket, start, fire_counts, run_counts)
