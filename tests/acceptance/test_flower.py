"""A real Flower shows what Gaffer did: a duplicate, an overlap skip, a lost fence, and
batch progress as numbers; through its API, and in a real headless browser.

Run on a Redis broker and on RabbitMQ: the events Flower reads cross the broker.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import redis
from celery import Celery
from kombu import Connection
from sqlalchemy import text

from celery_gaffer.settings import parse_database_url
from celery_gaffer.store import get_engine

from ..processes import CeleryProcess, celery_processes, project_env
from ..services import service_missing

pytestmark = pytest.mark.acceptance

PROJECT = """
import os
import time

from celery import Celery
from sqlalchemy import Integer, create_engine, select, text
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

import celery_gaffer
from celery_gaffer import GafferTask

app = Celery("fproj", broker=os.environ["FPROJ_BROKER"])
app.conf.gaffer_database_url = os.environ["FPROJ_DATABASE"]
app.conf.task_default_queue = os.environ["FPROJ_QUEUE"]
app.conf.result_backend = os.environ.get("FPROJ_BACKEND")
app.conf.worker_send_task_events = True
app.conf.broker_connection_retry_on_startup = True
app.conf.worker_prefetch_multiplier = 1
celery_gaffer.install(app)


class Base(DeclarativeBase):
    pass


class Item(Base):
    __tablename__ = "flower_items"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    handled: Mapped[int] = mapped_column(Integer, default=0)


@app.task(
    base=GafferTask, bind=True, name="fproj.settle", gaffer_key="invoice.settled:{invoice_id}"
)
def settle(self, invoice_id):
    with self.session() as session:
        session.get(Item, invoice_id).handled += 1
    return invoice_id


@app.task(name="fproj.after")
def after(label):
    return f"after {label}"


@app.task(base=GafferTask, bind=True, name="fproj.report", gaffer_overlap="forbid")
def report(self, release):
    # Runs until the test creates the file ``release`` (if any): a skip cannot race it.
    deadline = time.monotonic() + 120
    while release and not os.path.exists(release) and time.monotonic() < deadline:
        time.sleep(0.1)
    return "reported"


def fetch(session, after, limit):
    query = select(Item).order_by(Item.id).limit(limit)
    if after is not None:
        query = query.where(Item.id > after)
    return list(session.scalars(query))


def handle(session, item):
    time.sleep(0.02)
    item.handled += 1


@app.task(base=GafferTask, bind=True, name="fproj.reconcile")
def reconcile(self):
    report = self.run_batches("reconcile", fetch, handle, key=lambda item: item.id, batch_size=25)
    return report.processed


@app.task(base=GafferTask, bind=True, name="fproj.stolen")
def stolen(self):
    with self.lease("stolen", ttl=30):
        # Another holder takes the lease over, as it would while this run is paused.
        with create_engine(os.environ["FPROJ_DATABASE"]).begin() as conn:
            conn.execute(text("UPDATE gaffer_leases SET fence = fence + 1 WHERE name = 'stolen'"))
        with self.session() as session:
            session.get(Item, 1).handled += 100
"""

CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--window-size=1280,1000",
)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def api(port: int, path: str) -> Any:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
        return json.loads(response.read().decode())


def wait_for(
    what: str, check: Callable[[], Any], timeout: float = 60.0, seen: Callable[[], str] = str
) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        try:
            found = check()
        except (urllib.error.URLError, ConnectionError, json.JSONDecodeError, KeyError):
            found = None
        if found:
            return found
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout}s{seen()}")
        time.sleep(0.2)


def chromium() -> str:
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None:
        service_missing("Chromium", "/usr/bin/chromium", FileNotFoundError("apt install chromium"))
    return path


def browse(tmp_path: Path, url: str, *, screenshot: Path | None = None) -> str:
    """The page's DOM after its scripts ran (and a screenshot of it, when asked)."""
    profile = tmp_path / f"chromium-{uuid.uuid4().hex[:8]}"
    base = [chromium(), *CHROMIUM_FLAGS, f"--user-data-dir={profile}"]
    dom = subprocess.run(
        [*base, "--virtual-time-budget=5000", "--dump-dom", url],
        capture_output=True,
        text=True,
        timeout=90,
        check=True,
    ).stdout
    if screenshot is not None:
        subprocess.run(
            [*base, "--hide-scrollbars", f"--screenshot={screenshot}", url],
            capture_output=True,
            timeout=90,
            check=True,
        )
    return dom


@contextmanager
def flower(tmp_path: Path, module: str, env: dict[str, str]) -> Iterator[int]:
    port = free_port()
    process = subprocess.Popen(
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
        env={**env, "FLOWER_UNAUTHENTICATED_API": "true"},
        stdout=(tmp_path / "flower.log").open("wb"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        wait_for("Flower answers", lambda: api(port, "/api/workers") is not None)
        yield port
    finally:
        os.killpg(process.pid, 9)
        process.wait(10)


@pytest.mark.parametrize("broker", ["redis", "rabbitmq"])
def test_flower_shows_gaffer_outcomes_and_progress(
    tmp_path: Path,
    postgres_url: str,
    broker: str,
    request: pytest.FixtureRequest,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    broker_url = request.getfixturevalue("redis_url" if broker == "redis" else "amqp_url")
    queue = f"flower-{uuid.uuid4().hex[:8]}"
    engine = get_engine(parse_database_url(postgres_url))
    with engine.begin() as conn:
        conn.execute(text("DROP TABLE IF EXISTS flower_items"))
        conn.execute(text("CREATE TABLE flower_items (id INTEGER PRIMARY KEY, handled INTEGER)"))
        conn.execute(text("INSERT INTO flower_items SELECT g, 0 FROM generate_series(1, 200) g"))
    (tmp_path / "fproj.py").write_text(PROJECT)
    for name, value in (("BROKER", broker_url), ("DATABASE", postgres_url), ("QUEUE", queue)):
        monkeypatch.setenv(f"FPROJ_{name}", value)  # for the processes this test starts
    env = project_env(tmp_path)
    app = Celery("client", broker=broker_url, set_as_current=False)
    app.conf.task_default_queue = queue

    def send(name: str, *args: Any) -> str:
        return str(app.send_task(name, args=args).id)

    def task(port: int, task_id: str) -> dict[str, Any]:
        return dict(api(port, f"/api/task/info/{task_id}"))

    def ended(port: int, task_id: str, state: str) -> dict[str, Any] | None:
        info = task(port, task_id)
        return info if info["state"] == state else None

    def holds_lease(task_id: str) -> bool:
        with engine.connect() as conn:
            owner = conn.execute(
                text("SELECT owner FROM gaffer_leases WHERE name = :name"),
                {"name": "overlap:task:fproj.report"},
            ).scalar()
        return owner is not None and f":{task_id}:" in owner

    with celery_processes() as procs, flower(tmp_path, "fproj", env) as port:
        worker = CeleryProcess(
            tmp_path, "fproj", ["worker", "-E", "-c", "3", "-Q", queue, "--loglevel=INFO"], "w"
        )
        procs.append(worker)
        worker.wait_for_log("ready.")

        def seen(task_id: str) -> Callable[[], str]:
            def describe() -> str:
                try:
                    info = task(port, task_id)
                except (OSError, ValueError) as exc:  # URLError, timeouts, bad JSON
                    info = {"error": repr(exc)}
                flower_log = (tmp_path / "flower.log").read_text(errors="replace")
                return (
                    f"\nFlower has {info}\nworker log:\n{worker.log()[-4000:]}"
                    f"\nFlower log:\n{flower_log[-2000:]}"
                )

            return describe

        wait_for("Flower sees the worker", lambda: api(port, "/api/workers?refresh=1"))

        first = send("fproj.settle", 11)
        wait_for("first settle", lambda: ended(port, first, "SUCCESS"))
        second = send("fproj.settle", 11)
        release = tmp_path / "release"
        long_report = send("fproj.report", str(release))
        wait_for("the report runs", lambda: task(port, long_report).get("started"))
        # Flower's "started" comes from the worker's main process before the run takes
        # its overlap lease; the second report must start after that.
        wait_for(
            "the report holds its lease",
            lambda: holds_lease(long_report),
            seen=seen(long_report),
        )
        skipped_report = send("fproj.report", "")
        batches = send("fproj.reconcile")
        stolen = send("fproj.stolen")

        # While it runs: PROGRESS, with the numbers as its result.
        progress = wait_for(
            "batch progress",
            lambda: (info := task(port, batches))["state"] == "PROGRESS" and info["result"],
        )
        assert progress.startswith("processed "), progress
        assert "cursor " in progress
        assert "batches " in progress

        duplicate = wait_for(
            "duplicate", lambda: ended(port, second, "DUPLICATE"), seen=seen(second)
        )
        assert duplicate["result"] == (
            "duplicate: key invoice.settled:11 was completed by an earlier run"
        )
        skipped = wait_for(
            "skip", lambda: ended(port, skipped_report, "SKIPPED"), seen=seen(skipped_report)
        )
        release.touch()
        assert skipped["result"] == (
            "skipped: overlap=forbid: lease overlap:task:fproj.report is held by another live run"
        )
        lost = wait_for("fence lost", lambda: ended(port, stolen, "FAILURE"), seen=seen(stolen))
        assert "FenceLost" in lost["exception"]
        assert "'stolen'" in lost["exception"]
        wait_for("batches end", lambda: ended(port, batches, "SUCCESS"), seen=seen(batches))
        wait_for("report ends", lambda: ended(port, long_report, "SUCCESS"), seen=seen(long_report))
        listed = api(port, "/api/tasks")
        assert listed[second]["state"] == "DUPLICATE"
        assert listed[skipped_report]["state"] == "SKIPPED"
        assert listed[first]["state"] == "SUCCESS"
        assert listed[first]["result"] == "11"

        # What a user sees in a browser: the task page and the task list.
        shots = Path(os.environ.get("GAFFER_SCREENSHOT_DIR", tmp_path))
        page = browse(
            tmp_path,
            f"http://127.0.0.1:{port}/task/{second}",
            screenshot=shots / f"flower-duplicate-{broker}.png",
        )
        assert "DUPLICATE" in page
        assert "key invoice.settled:11 was completed by an earlier run" in page
        assert (shots / f"flower-duplicate-{broker}.png").read_bytes()[:4] == b"\x89PNG"
        listing = browse(tmp_path, f"http://127.0.0.1:{port}/tasks")
        assert second in listing
        assert "DUPLICATE" in listing
        assert "SKIPPED" in listing

    # Every delivery was acknowledged, the duplicate and the skip included: a warm
    # shutdown puts an unacknowledged message back in its queue.
    if broker == "redis":
        client = redis.Redis.from_url(broker_url)
        left = client.llen(queue) + client.hlen("unacked")
    else:
        with Connection(broker_url) as connection:
            channel = connection.default_channel
            left = channel.queue_declare(queue, passive=True).message_count
            channel.queue_delete(queue)
    assert left == 0

    # The run records agree, with the same reasons.
    with engine.connect() as conn:
        rows = dict(
            conn.execute(
                text(
                    "SELECT task_id, state || ': ' || coalesce(error_message, '') FROM "
                    "gaffer_job_runs WHERE task_id IN (:a, :b, :c)"
                ),
                {"a": second, "b": skipped_report, "c": stolen},
            ).all()
        )
        handled = dict(
            conn.execute(text("SELECT id, handled FROM flower_items WHERE id IN (1, 11)")).all()
        )
    assert rows[second] == "duplicate: key invoice.settled:11 was completed by an earlier run"
    assert rows[skipped_report].startswith("skipped: overlap=forbid: lease ")
    assert rows[stolen].startswith("fence_lost: lease 'stolen'")
    # Invoice 11: settled once (never by the duplicate) and one batch pass; item 1: the
    # batch pass only (the stale fence's write was rolled back).
    assert handled == {1: 1, 11: 2}


def test_a_duplicate_still_returns_none_and_a_chain_goes_on(
    tmp_path: Path, postgres_url: str, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ending a duplicate with its own Flower state changes nothing else: a caller waiting
    on its result gets None, and a chain whose step is a duplicate sends its next step."""
    from celery import chain

    queue = f"flower-{uuid.uuid4().hex[:8]}"
    engine = get_engine(parse_database_url(postgres_url))
    with engine.begin() as conn:
        conn.execute(text("DROP TABLE IF EXISTS flower_items"))
        conn.execute(text("CREATE TABLE flower_items (id INTEGER PRIMARY KEY, handled INTEGER)"))
        conn.execute(text("INSERT INTO flower_items VALUES (11, 0)"))
    (tmp_path / "fproj.py").write_text(PROJECT)
    settings = {"BROKER": redis_url, "DATABASE": postgres_url, "QUEUE": queue, "BACKEND": redis_url}
    for name, value in settings.items():
        monkeypatch.setenv(f"FPROJ_{name}", value)
    app = Celery("client", broker=redis_url, backend=redis_url, set_as_current=False)
    app.conf.task_default_queue = queue
    with celery_processes() as procs:
        worker = CeleryProcess(
            tmp_path, "fproj", ["worker", "-c", "1", "-Q", queue, "--loglevel=INFO"], "w"
        )
        procs.append(worker)
        worker.wait_for_log("ready.")
        assert app.send_task("fproj.settle", args=(11,)).get(timeout=30) == 11
        assert app.send_task("fproj.settle", args=(11,)).get(timeout=30) is None
        steps = chain(
            app.signature("fproj.settle", args=(11,), immutable=True),
            app.signature("fproj.after", args=("the duplicate",), immutable=True),
        )
        assert steps.apply_async().get(timeout=30) == "after the duplicate"
        worker.wait_for_log("ended duplicate")
    with engine.connect() as conn:
        states = (
            conn.execute(
                text(
                    "SELECT state FROM gaffer_job_runs WHERE task_name = 'fproj.settle' ORDER BY id"
                )
            )
            .scalars()
            .all()
        )
        handled = conn.execute(text("SELECT handled FROM flower_items WHERE id = 11")).scalar()
    assert states == ["succeeded", "duplicate", "duplicate"]
    assert handled == 1
