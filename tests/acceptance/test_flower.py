"""A real Flower process shows Gaffer runs: name, arguments, SUCCESS, and PROGRESS."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from celery import Celery
from sqlalchemy import text

from celery_gaffer import ScheduleStore, every
from celery_gaffer.settings import parse_database_url
from celery_gaffer.store import get_engine

from ..processes import CeleryProcess, celery_processes, project_env
from .runs_project import write_runs_project

pytestmark = pytest.mark.acceptance


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def api(port: int, path: str) -> Any:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
        return json.loads(response.read().decode())


def _stub(*args: Any) -> None:
    return None


def test_flower_shows_scheduled_runs_and_batch_progress(
    tmp_path: Path, postgres_url: str, redis_url: str
) -> None:
    module = write_runs_project(tmp_path, redis_url, postgres_url)
    engine = get_engine(parse_database_url(postgres_url))
    with engine.begin() as conn:
        conn.execute(text("DROP TABLE IF EXISTS test_items"))
        conn.execute(
            text("CREATE TABLE test_items (id INTEGER PRIMARY KEY, handled INTEGER NOT NULL)")
        )
        conn.execute(text("INSERT INTO test_items SELECT g, 0 FROM generate_series(1, 300) g"))
    app = Celery("rproj", broker=redis_url, set_as_current=False)
    app.conf.gaffer_database_url = postgres_url
    app.task(name="rproj.ok", shared=False)(_stub)
    ScheduleStore(app).add("hourly-ok", "rproj.ok", every(3600), args=[5])
    port = free_port()
    with celery_processes() as procs:
        env = {**project_env(tmp_path), "FLOWER_UNAUTHENTICATED_API": "true"}
        flower = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "celery",
                "-A",
                module,
                "flower",
                f"--port={port}",
                "--address=127.0.0.1",
            ],
            cwd=tmp_path,
            env=env,
            stdout=(tmp_path / "flower.log").open("wb"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        worker = CeleryProcess(
            tmp_path, module, ["worker", "-E", "--pool=solo", "--loglevel=INFO"], "w"
        )
        procs.append(worker)
        worker.wait_for_log("ready.")
        try:
            deadline = time.monotonic() + 30
            while True:
                try:
                    api(port, "/api/workers?refresh=1")
                    break
                except (urllib.error.URLError, ConnectionError, json.JSONDecodeError):
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.5)
            time.sleep(1)
            fired = ScheduleStore(app).trigger("hourly-ok")
            batch = app.send_task("rproj.batchy")
            seen_states = set()
            deadline = time.monotonic() + 60
            tasks: dict[str, Any] = {}
            while time.monotonic() < deadline:
                tasks = api(port, "/api/tasks")
                info = tasks.get(batch.id)
                if info:
                    seen_states.add(info["state"])
                    if info["state"] == "SUCCESS":
                        break
                time.sleep(0.2)
            from celery_gaffer.protocol import fire_task_id

            scheduled = tasks[fire_task_id(fired)]
            assert scheduled["name"] == "rproj.ok"
            assert scheduled["state"] == "SUCCESS"
            assert "5" in str(scheduled["args"])
            assert "PROGRESS" in seen_states
            assert tasks[batch.id]["state"] == "SUCCESS"
        finally:
            os.killpg(flower.pid, 9)
            flower.wait(10)
