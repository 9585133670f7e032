"""One test per run state: real worker processes, Redis and PostgreSQL."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from celery import Celery
from sqlalchemy import select

from celery_gaffer import Scheduler, ScheduleStore, every
from celery_gaffer.store import database_for

from ..processes import CeleryProcess, celery_processes
from .runs_project import write_runs_project

pytestmark = pytest.mark.acceptance


@pytest.fixture
def client(postgres_url: str, redis_url: str) -> Iterator[Celery]:
    app = Celery("rproj", broker=redis_url, set_as_current=False)
    app.conf.gaffer_database_url = postgres_url
    app.conf.gaffer_lease_ttl = 2
    for name in ("rproj.ok", "rproj.sleepy", "rproj.flaky", "rproj.plain"):
        app.task(name=name, shared=False, bind=True)(_stub)
    yield app
    app.close()


def _stub(self: Any, *args: Any, **kwargs: Any) -> None:
    return None


def wait_until(predicate: Callable[[], Any], timeout: float = 30.0, what: str = "") -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def rows(app: Celery, **where: Any) -> list[dict[str, Any]]:
    database = database_for(app)
    table = database.models.JobRun.__table__  # type: ignore[attr-defined]
    query = select(table).order_by(table.c.id)
    for column, value in where.items():
        query = query.where(table.c[column] == value)
    with database.read() as conn:
        return [dict(row) for row in conn.execute(query).mappings()]


def final(app: Celery, task_id: str) -> list[dict[str, Any]]:
    """The task's run rows once its latest delivery has ended, else []."""
    found = rows(app, task_id=task_id)
    return found if found and found[-1]["state"] not in ("running", "retrying") else []


def test_each_run_state_is_recorded_with_its_fields(
    tmp_path: Path, postgres_url: str, redis_url: str, client: Celery
) -> None:
    module = write_runs_project(tmp_path, redis_url, postgres_url)
    with celery_processes() as procs:
        worker = CeleryProcess(
            tmp_path,
            module,
            ["worker", "--pool=prefork", "-c", "2", "-n", "w1@%h", "--loglevel=INFO"],
            "w1",
        )
        procs.append(worker)
        worker.wait_for_log("ready.")

        ok = client.send_task("rproj.ok", args=[7])
        boom = client.send_task("rproj.boom")
        retry = client.send_task("rproj.retry")
        later = client.send_task("rproj.sleepy", args=[0.1], countdown=4)
        long = client.send_task("rproj.sleepy", args=[60])

        [succeeded] = wait_until(lambda: final(client, ok.id), what="ok")
        assert succeeded["state"] == "succeeded"
        assert succeeded["key"] == "ok:7"
        assert succeeded["attempt"] == 1
        assert succeeded["task_name"] == "rproj.ok"
        assert succeeded["worker"].startswith("w1@")
        assert succeeded["started_at"] <= succeeded["finished_at"]
        assert succeeded["duration"] >= 0

        [failed] = wait_until(lambda: final(client, boom.id), what="boom")
        assert failed["state"] == "failed"
        assert failed["error_type"] == "ValueError"
        assert failed["error_message"].startswith("kaboom kaboom")
        assert len(failed["error_message"]) == 2000  # truncated

        retried = wait_until(lambda: final(client, retry.id), what="retry")
        assert [r["state"] for r in retried] == ["retrying", "succeeded"]
        assert [r["attempt"] for r in retried] == [1, 2]
        assert retried[0]["error_type"] == "RuntimeError"
        assert retried[0]["error_message"] == "try again"

        wait_until(lambda: rows(client, task_id=long.id), what="the long run to start")
        client.control.revoke(later.id)
        client.control.revoke(long.id, terminate=True, signal="SIGKILL")
        [terminated] = wait_until(lambda: final(client, long.id), what="terminated")
        assert terminated["state"] == "revoked"
        assert terminated["finished_at"] is not None
        [never_started] = wait_until(
            lambda: final(client, later.id), timeout=20, what="revoked before start"
        )
        assert never_started["state"] == "revoked"
        assert never_started["started_at"] is None

        # lost: the worker is killed mid-run; Beat finds the heartbeat stopped.
        doomed = client.send_task("rproj.sleepy", args=[60])
        wait_until(lambda: rows(client, task_id=doomed.id), what="the doomed run to start")
        worker.kill(signal.SIGKILL)
    scheduler = Scheduler(client)
    try:
        [lost] = wait_until(
            lambda: (
                scheduler.tick(),
                [r for r in rows(client, task_id=doomed.id) if r["state"] == "lost"],
            )[1],
            timeout=20,
            what="lost",
        )
    finally:
        scheduler.close()  # its sending thread too, even when the wait fails
    assert lost["error_type"] == "WorkerLost"
    assert lost["finished_at"] is not None


def test_a_plain_task_sent_by_gaffer_beat_is_recorded_with_its_fire(
    tmp_path: Path, postgres_url: str, redis_url: str, client: Celery
) -> None:
    module = write_runs_project(tmp_path, redis_url, postgres_url)
    ScheduleStore(client).add("plain", "rproj.plain", every(1))
    scheduler = Scheduler(client)
    with celery_processes() as procs:
        worker = CeleryProcess(tmp_path, module, ["worker", "--pool=solo", "--loglevel=INFO"], "w")
        procs.append(worker)
        worker.wait_for_log("ready.")
        deadline = time.monotonic() + 20
        try:
            while time.monotonic() < deadline and not [
                r for r in rows(client, schedule="plain") if r["state"] == "succeeded"
            ]:
                time.sleep(scheduler.tick())
        finally:
            scheduler.close()  # its sending thread too, even when a tick fails
    run = next(r for r in rows(client, schedule="plain") if r["state"] == "succeeded")
    assert run["task_name"] == "rproj.plain"
    assert run["key"].startswith("plain@")
    assert run["key"] == f"plain@{run['nominal_at']:%Y-%m-%dT%H:%M:%SZ}"


@pytest.mark.parametrize("pool", ["prefork", "solo"])
def test_a_run_end_the_database_holds_up_does_not_hold_the_worker_and_is_written_before_exit(
    tmp_path: Path, postgres_url: str, redis_url: str, client: Celery, pool: str
) -> None:
    """The end record is written beside the worker: while the database makes it wait
    (the test holds the run's row lock), the worker goes on to its next task; a warm
    shutdown then waits for it, and exits only once it is written."""
    module = write_runs_project(tmp_path, redis_url, postgres_url)
    database = database_for(client)
    table = database.models.JobRun.__table__  # type: ignore[attr-defined]
    with celery_processes() as procs:
        worker = CeleryProcess(
            tmp_path,
            module,
            ["worker", f"--pool={pool}", "-c", "1", "-n", f"{pool}@%h", "--loglevel=INFO"],
            pool,
        )
        procs.append(worker)
        worker.wait_for_log("ready.")
        slow = client.send_task("rproj.sleepy", args=[1.5])
        [started] = wait_until(lambda: rows(client, task_id=slow.id), what="the slow run")
        with database.begin() as conn:
            # The row is locked until this block ends: the run's end record waits.
            conn.execute(select(table.c.id).where(table.c.id == started["id"]).with_for_update())
            after = client.send_task("rproj.ok", args=[3])
            # The next task started (its start record is written in the worker's own
            # thread): the worker was not held by the waiting end record.
            wait_until(lambda: rows(client, task_id=after.id), timeout=30, what="the next run")
            # ... and ended: its body returned while the earlier end still waits. (A
            # SIGTERM to the group while it ran would kill the pool child mid-task, and
            # the run would end failed: a CI failure once.)
            worker.wait_for_log(f"Task rproj.ok[{after.id}] succeeded", timeout=30)
            assert rows(client, task_id=slow.id)[0]["state"] == "running"
            assert rows(client, task_id=after.id)[0]["state"] == "running"
            worker.kill(signal.SIGTERM)  # a warm shutdown: the queued ends are written first
            time.sleep(2)
            assert worker.process.poll() is None, worker.log()[-3000:]
        worker.process.wait(30)
        assert worker.process.returncode == 0, worker.log()[-3000:]
    [slow_end] = rows(client, task_id=slow.id)
    assert slow_end["state"] == "succeeded"
    assert slow_end["finished_at"] - slow_end["started_at"] < timedelta(seconds=3)
    [after_end] = rows(client, task_id=after.id)
    assert after_end["state"] == "succeeded"
