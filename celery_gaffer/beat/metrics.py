"""Prometheus metrics served by Beat on 127.0.0.1:``gaffer_metrics_port``.

Gauges per schedule (``gaffer_last_success_timestamp_seconds``,
``gaffer_consecutive_failures``, ``gaffer_schedule_late``), the counter
``gaffer_runs_total{state}`` fed from finished run rows, and histograms of fire lag (sent
minus nominal) and run duration. Uses its own registry, never the global one.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any

from sqlalchemy import Connection

from ..exceptions import ConfigurationError
from ..protocol import Health as State
from ..store import runs as run_rows
from ..store.fires import Fire
from ..store.models import Models
from .health import Health

#: Why Beat cannot serve metrics when ``gaffer_metrics_port`` is set without the extra.
MISSING_CLIENT = (
    "gaffer_metrics_port: prometheus-client is not installed: pip install 'celery-gaffer[metrics]'"
)


def require_client() -> None:
    """Check that prometheus-client (the ``metrics`` extra) can be imported, else raise
    :class:`~celery_gaffer.ConfigurationError` naming ``gaffer_metrics_port`` and the
    extra to install."""
    try:
        import prometheus_client  # noqa: F401 - imported to be checked, used by Metrics
    except ModuleNotFoundError as exc:
        if (exc.name or "").partition(".")[0] != "prometheus_client":
            raise  # installed, but something it imports is not: its own error says what
        raise ConfigurationError(MISSING_CLIENT, field="gaffer_metrics_port") from None


class Metrics:
    """The metrics of one Beat process, and the HTTP server that exposes them.

    Needs prometheus-client (the ``metrics`` extra): without it, building one raises
    :class:`~celery_gaffer.ConfigurationError` naming ``gaffer_metrics_port``.
    """

    def __init__(self, port: int | None, address: str = "127.0.0.1") -> None:
        require_client()
        from prometheus_client import (
            CollectorRegistry,
            Counter,
            Gauge,
            Histogram,
            start_http_server,
        )

        self.registry = CollectorRegistry()
        self.last_success = Gauge(
            "gaffer_last_success_timestamp_seconds",
            "Unix time of the schedule's last succeeded run.",
            ["schedule"],
            registry=self.registry,
        )
        self.failures = Gauge(
            "gaffer_consecutive_failures",
            "Consecutive failed (or lost) runs of the schedule.",
            ["schedule"],
            registry=self.registry,
        )
        self.late = Gauge(
            "gaffer_schedule_late",
            "1 while the schedule is late, else 0.",
            ["schedule"],
            registry=self.registry,
        )
        self.runs = Counter(
            "gaffer_runs", "Finished runs by final state.", ["state"], registry=self.registry
        )
        self.fire_lag = Histogram(
            "gaffer_fire_lag_seconds",
            "Seconds from a fire's nominal time to its send.",
            buckets=(0.01, 0.05, 0.1, 0.5, 1, 2, 5, 10, 30, 60, 300),
            registry=self.registry,
        )
        self.duration = Histogram(
            "gaffer_run_duration_seconds",
            "Run duration.",
            buckets=(0.01, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 1800, 3600),
            registry=self.registry,
        )
        self._since: datetime | None = None
        self.server: Any = None
        if port is not None:
            self.server, _thread = start_http_server(port, addr=address, registry=self.registry)

    def observe_health(self, health: Health) -> None:
        name = health.schedule
        if health.last_success_at is not None:
            self.last_success.labels(name).set(health.last_success_at.timestamp())
        self.failures.labels(name).set(health.consecutive_failures)
        self.late.labels(name).set(1 if health.state == State.LATE else 0)

    def observe_sent(self, fires: Iterable[Fire], now: datetime) -> None:
        """Fire lag of fires sent at ``now``."""
        for fire in fires:
            self.fire_lag.observe(max(0.0, (now - fire.nominal_at).total_seconds()))

    def observe_runs(self, conn: Connection, models: Models, now: datetime) -> None:
        """Count runs that reached a final state since the last call."""
        since, self._since = self._since, now
        if since is None:
            return
        counts, durations = run_rows.finished_between(conn, models, since, now)
        for state, count in counts:
            self.runs.labels(state).inc(count)
        for duration in durations:
            self.duration.observe(duration)

    def close(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.server = None
