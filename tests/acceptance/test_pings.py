"""Per-schedule ping URLs from a real ``celery beat -S gaffer`` and a real worker.

A real HTTP receiver on 127.0.0.1 records each GET (answering the first one 500): every
run pings ``/start`` and then its end (success, or ``/fail``), paired by ``rid``; a
retrying attempt sends no end of its own; a failed ping is tried again. A monitor that
never answers delays neither the other monitors' pings nor the runs.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections import defaultdict
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from celery import Celery

from celery_gaffer import ScheduleStore, every
from celery_gaffer.store import database_for
from celery_gaffer.store.runs import latest_runs

from ..processes import CeleryProcess, celery_processes
from ..receivers import RawReceiver, hang
from .runs_project import write_runs_project

pytestmark = pytest.mark.acceptance


class PingReceiver:
    """Records each GET as (path, rid, status); answers 500 to the first ``fail_next``."""

    def __init__(self) -> None:
        self.pings: list[tuple[str, str | None, int]] = []
        self.fail_next = 0
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                parts = urlsplit(self.path)
                rid = parse_qs(parts.query).get("rid", [None])[0]
                failed = receiver.fail_next > 0
                receiver.fail_next -= int(failed)
                receiver.pings.append((parts.path, rid, 500 if failed else 200))
                self.send_response(500 if failed else 200)
                self.end_headers()
                self.wfile.write(b"OK")

            def log_message(self, *args: Any) -> None:
                return None

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join()

    def runs(self, check: str) -> dict[str, list[str]]:
        """Each run's delivered pings (paths after the check's own), in order, by rid."""
        found: dict[str, list[str]] = defaultdict(list)
        for path, rid, status in list(self.pings):
            if status == 200 and path.startswith(check) and rid is not None:
                found[rid].append(path[len(check) :] or "success")
        return found


def _stub() -> None:
    return None


def _start_beat_and_worker(
    procs: list[CeleryProcess], tmp_path: Path, module: str
) -> CeleryProcess:
    """A Beat and a solo worker of ``module``; the worker, once ready."""
    procs.append(
        CeleryProcess(
            tmp_path,
            module,
            ["beat", "-S", "gaffer", "--loglevel=INFO", "-s", str(tmp_path / "b")],
            "beat",
        )
    )
    worker = CeleryProcess(tmp_path, module, ["worker", "--pool=solo", "--loglevel=INFO"], "w")
    procs.append(worker)
    worker.wait_for_log("ready.")
    return worker


def test_runs_ping_start_and_their_end_paired_by_run_id(
    tmp_path: Path, postgres_url: str, redis_url: str
) -> None:
    receiver = PingReceiver()
    receiver.fail_next = 1
    module = write_runs_project(tmp_path, redis_url, postgres_url)
    app = Celery("rproj", broker=redis_url, set_as_current=False)
    app.conf.gaffer_database_url = postgres_url
    for name in ("rproj.plain", "rproj.boom", "rproj.retry"):
        app.task(name=name, shared=False)(_stub)
    checks = {name: f"/ping/{uuid.uuid4()}" for name in ("plain", "boom", "retry")}
    base = f"http://127.0.0.1:{receiver.port}"
    store = ScheduleStore(app)
    for name, check in checks.items():
        store.add(name, f"rproj.{name}", every(2), gaffer={"ping_url": base + check})

    def ended(name: str) -> list[list[str]]:
        return [p for p in receiver.runs(checks[name]).values() if p[-1] != "/start"]

    try:
        with celery_processes() as procs:
            worker = _start_beat_and_worker(procs, tmp_path, module)
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                if all(len(ended(name)) >= 2 for name in checks):
                    break
                time.sleep(0.3)
            worker_log = worker.log()
    finally:
        receiver.stop()

    for name, end in (("plain", "success"), ("boom", "/fail"), ("retry", "success")):
        runs = ended(name)
        assert len(runs) >= 2, (name, receiver.pings)
        # One start, then the end; a retrying attempt starts again without an end.
        expected = ["/start", "/start", end] if name == "retry" else ["/start", end]
        assert all(pings == expected for pings in runs), (name, runs)
    assert [status for *_, status in receiver.pings].count(500) == 1  # retried, then sent
    assert not any(check in worker_log for check in checks.values())


def test_a_hanging_monitor_delays_neither_other_pings_nor_the_runs(
    tmp_path: Path, postgres_url: str, redis_url: str
) -> None:
    stop = threading.Event()
    hung = RawReceiver(hang(stop))
    receiver = PingReceiver()
    module = write_runs_project(tmp_path, redis_url, postgres_url)
    app = Celery("rproj", broker=redis_url, set_as_current=False)
    app.conf.gaffer_database_url = postgres_url
    app.task(name="rproj.plain", shared=False)(_stub)
    check = f"/ping/{uuid.uuid4()}"
    store = ScheduleStore(app)
    store.add("hung", "rproj.plain", every(1), gaffer={"ping_url": hung.url("/hung-check")})
    fine_url = f"http://127.0.0.1:{receiver.port}{check}"
    store.add("fine", "rproj.plain", every(1), gaffer={"ping_url": fine_url})
    database = database_for(app)

    def succeeded(schedule: str) -> int:
        with database.read() as conn:
            rows = latest_runs(conn, database.models, limit=1000, schedule=schedule)
        return sum(row["state"] == "succeeded" for row in rows)

    try:
        with celery_processes() as procs:
            worker = _start_beat_and_worker(procs, tmp_path, module)
            time.sleep(15)
            ended = [p for p in receiver.runs(check).values() if p[-1] != "/start"]
            runs = {name: succeeded(name) for name in ("hung", "fine")}
            worker_log = worker.log()
    finally:
        stop.set()
        hung.stop()
        receiver.stop()

    # One ping a second for each schedule: with one thread for every monitor, the first
    # ping to the hanging one would have held up every other ping of the worker.
    assert len(ended) >= 10, receiver.pings
    assert all(pings == ["/start", "success"] for pings in ended)
    assert runs["hung"] >= 10, runs  # and its own runs go on, on time
    assert runs["fine"] >= 10, runs
    assert len(hung.requests) <= 3  # its pings wait their turn: a total deadline each
    assert "hung-check" not in worker_log
