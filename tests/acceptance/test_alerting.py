"""Late and failing schedules, their recovery, status exit codes and Prometheus metrics.

Beat runs in-process (its signals and log records are observed directly) against real
Redis and PostgreSQL; the jobs run in a real worker; `gaffer status` runs as the CLI.
"""

from __future__ import annotations

import logging
import socket
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from celery import Celery

from celery_gaffer import Scheduler, ScheduleStore, every
from celery_gaffer.signals import job_failing, job_late, job_recovered

from ..processes import CeleryProcess, celery_processes, project_env
from .runs_project import write_runs_project

pytestmark = pytest.mark.acceptance


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def scrape(port: int) -> dict[str, float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    samples = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            samples[name] = float(value)
    return samples


def _stub() -> None:
    return None


def status(tmp_path: Path, module: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "celery", "-A", module, "gaffer", "status"],
        cwd=tmp_path,
        env=project_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_late_failing_recovered_each_reported_once(
    tmp_path: Path, postgres_url: str, redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    module = write_runs_project(tmp_path, redis_url, postgres_url)
    port = free_port()
    app = Celery("rproj", broker=redis_url, set_as_current=False)
    app.conf.gaffer_database_url = postgres_url
    app.conf.gaffer_alert_after_failures = 3
    app.conf.gaffer_metrics_port = port
    for name in ("rproj.flaky", "rproj.plain"):
        app.task(name=name, shared=False)(_stub)
    flag = tmp_path / "broken.flag"
    flag.write_text("broken")
    store = ScheduleStore(app)
    store.add(
        "orphan", "rproj.plain", every(1), options={"queue": "nobody-listens"}, gaffer={"grace": 2}
    )
    store.add("flaky", "rproj.flaky", every(1), gaffer={"grace": 30})

    received: list[tuple[str, str]] = []

    def receiver(name: str) -> Any:
        def on_signal(sender: str, **kwargs: Any) -> None:
            received.append((name, sender))

        return on_signal

    receivers = {
        sig: receiver(name)
        for sig, name in (
            (job_late, "late"),
            (job_failing, "failing"),
            (job_recovered, "recovered"),
        )
    }
    for sig, fn in receivers.items():
        sig.connect(fn, weak=False)
    scheduler = Scheduler(app)

    def tick_until(condition: Any, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            time.sleep(min(scheduler.tick(), 0.5))
            if condition():
                return
        raise AssertionError(f"timed out; signals so far {received}")

    try:
        with caplog.at_level(logging.ERROR, logger="celery_gaffer"), celery_processes() as procs:
            worker = CeleryProcess(
                tmp_path, module, ["worker", "--pool=solo", "--loglevel=INFO"], "w"
            )
            procs.append(worker)
            worker.wait_for_log("ready.")
            tick_until(
                lambda: ("late", "orphan") in received and ("failing", "flaky") in received, 40
            )

            during = status(tmp_path, module)
            assert during.returncode == 1, during.stdout + during.stderr
            lines = {line.split()[0]: line.split()[1] for line in during.stdout.splitlines()[1:-1]}
            assert lines == {"flaky": "failing", "orphan": "late"}
            metrics = scrape(port)
            assert metrics['gaffer_schedule_late{schedule="orphan"}'] == 1.0
            assert metrics['gaffer_consecutive_failures{schedule="flaky"}'] >= 3
            assert metrics.get('gaffer_runs_total{state="failed"}', 0) >= 1

            flag.unlink()  # fix the job
            tick_until(lambda: ("recovered", "flaky") in received, 30)
            store.pause("orphan")
            for _ in range(3):
                time.sleep(min(scheduler.tick(), 0.5))
            after = status(tmp_path, module)
            assert after.returncode == 0, after.stdout + after.stderr
            metrics = scrape(port)
            assert metrics['gaffer_consecutive_failures{schedule="flaky"}'] == 0
            assert (
                metrics['gaffer_last_success_timestamp_seconds{schedule="flaky"}']
                > time.time() - 60
            )
    finally:
        scheduler.close()
        for sig, fn in receivers.items():
            sig.disconnect(fn)

    assert Counter(received) == {
        ("late", "orphan"): 1,
        ("failing", "flaky"): 1,
        ("recovered", "flaky"): 1,
    }
    actions = Counter(
        (r.action, r.schedule)  # type: ignore[attr-defined]
        for r in caplog.records
        if getattr(r, "action", "").startswith("job_")
    )
    assert actions == {
        ("job_late", "orphan"): 1,
        ("job_failing", "flaky"): 1,
        ("job_recovered", "flaky"): 1,
    }
