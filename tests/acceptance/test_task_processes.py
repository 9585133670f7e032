"""GafferTask with real `celery worker` processes, Redis, and PostgreSQL or SQLite."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from celery import Celery
from sqlalchemy import select, text

from celery_gaffer.protocol import fire_key, fire_task_id
from celery_gaffer.settings import parse_database_url
from celery_gaffer.store import database_for, get_engine

from ..processes import CeleryProcess, celery_processes
from .task_project import effect_rows, write_task_project

pytestmark = pytest.mark.acceptance


@pytest.fixture
def client(database_url: str, redis_url: str) -> Iterator[Celery]:
    app = Celery("client", broker=redis_url, set_as_current=False)
    app.conf.gaffer_database_url = database_url
    yield app
    app.close()


def wait_until(predicate: Callable[[], bool], timeout: float = 30.0, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what or predicate}")


def run_states(app: Celery, task_name: str) -> list[str]:
    database = database_for(app)
    runs = database.models.JobRun
    with database.read() as conn:
        rows = conn.execute(select(runs.state).where(runs.task_name == task_name).order_by(runs.id))
        return list(rows.scalars())


def worker(tmp_path: Path, module: str, name: str, *args: str) -> CeleryProcess:
    return CeleryProcess(
        tmp_path, module, ["worker", "--loglevel=INFO", "-n", f"{name}@%h", *args], name
    )


def test_the_same_work_twice_and_one_fire_delivered_twice_at_once_have_one_effect(
    tmp_path: Path, database_url: str, redis_url: str, client: Celery
) -> None:
    module = write_task_project(tmp_path, redis_url, database_url)
    with celery_processes() as procs:
        procs.append(worker(tmp_path, module, "w1", "--pool=threads", "-c", "4"))
        procs[0].wait_for_log("ready.")
        client.send_task("tproj.settle", args=[42])
        wait_until(lambda: run_states(client, "tproj.settle") == ["succeeded"], what="first run")
        client.send_task("tproj.settle", args=[42])
        wait_until(lambda: len(run_states(client, "tproj.settle")) == 2, what="second run")

        # One scheduled fire, delivered twice at once: same task id, same key header.
        key = fire_key(
            "nightly",
            __import__("datetime").datetime(2026, 6, 1, tzinfo=__import__("datetime").timezone.utc),
        )
        headers = {
            "gaffer_schedule": "nightly",
            "gaffer_nominal_at": "2026-06-01T00:00:00Z",
            "gaffer_key": key,
        }
        for _ in range(2):
            client.send_task(
                "tproj.fire", kwargs={"pause": 1.0}, task_id=fire_task_id(key), headers=headers
            )
        wait_until(
            lambda: (
                len(run_states(client, "tproj.fire")) == 2
                and "running" not in run_states(client, "tproj.fire")
            ),
            what="both deliveries",
        )
    assert [label for label, _, _ in effect_rows(database_url)] == ["settled 42", key]
    assert run_states(client, "tproj.settle") == ["succeeded", "duplicate"]
    assert sorted(run_states(client, "tproj.fire")) == ["duplicate", "succeeded"]


def test_a_paused_holder_cannot_write_after_its_lease_was_taken(
    tmp_path: Path, database_url: str, redis_url: str, client: Celery
) -> None:
    module = write_task_project(tmp_path, redis_url, database_url)
    on_postgresql = parse_database_url(database_url).get_backend_name() == "postgresql"
    if on_postgresql:
        # What the docs recommend: a holder frozen inside a transaction loses its locks.
        _set_idle_in_transaction_timeout(database_url, "1000")
    try:
        _pause_a_holder(tmp_path, module, database_url, client)
    finally:
        if on_postgresql:  # the database is shared with later tests
            _set_idle_in_transaction_timeout(database_url, None)


def _set_idle_in_transaction_timeout(database_url: str, value: str | None) -> None:
    url = parse_database_url(database_url)
    setting = "RESET idle_in_transaction_session_timeout"
    if value is not None:
        setting = f"SET idle_in_transaction_session_timeout = {int(value)}"
    with get_engine(url).connect() as conn:
        conn.execution_options(isolation_level="AUTOCOMMIT").execute(
            text(f'ALTER DATABASE "{url.database}" {setting}')
        )


def _pause_a_holder(tmp_path: Path, module: str, database_url: str, client: Celery) -> None:
    with celery_processes() as procs:
        a = worker(tmp_path, module, "wa", "--pool=solo", "-Q", "a")
        b = worker(tmp_path, module, "wb", "--pool=solo", "-Q", "b")
        procs += [a, b]
        a.wait_for_log("ready.")
        b.wait_for_log("ready.")
        client.send_task("tproj.fenced_writer", args=["A", 40, 0.4, 2.0], queue="a")
        wait_until(lambda: len(effect_rows(database_url)) >= 3, what="A's first writes")
        count = len(effect_rows(database_url))
        wait_until(lambda: len(effect_rows(database_url)) > count, what="A's next write")
        a.kill(signal.SIGSTOP)  # right after a commit: A is sleeping between writes
        paused_at = time.monotonic()
        before_pause = effect_rows(database_url)
        client.send_task("tproj.fenced_writer", args=["B", 5, 0.1, 30.0, 10.0], queue="b")
        wait_until(
            lambda: sum(1 for _, w, _ in effect_rows(database_url) if w == "B") == 5,
            what="B's writes",
        )
        time.sleep(max(0.0, 4.0 - (time.monotonic() - paused_at)))
        a.kill(signal.SIGCONT)
        wait_until(
            lambda: "fence_lost" in run_states(client, "tproj.fenced_writer"), what="A's fence_lost"
        )
    rows = effect_rows(database_url)
    a_rows = [r for r in rows if r[1] == "A"]
    b_rows = [r for r in rows if r[1] == "B"]
    assert a_rows == [r for r in before_pause if r[1] == "A"]  # nothing of A's after the pause
    assert len(b_rows) == 5
    assert {fence for _, _, fence in b_rows} == {a_rows[0][2] + 1}
    assert sorted(run_states(client, "tproj.fenced_writer")) == ["fence_lost", "succeeded"]


def test_a_batch_run_killed_half_way_resumes_and_handles_every_row_once(
    tmp_path: Path, postgres_url: str, redis_url: str
) -> None:
    client = Celery("client", broker=redis_url, set_as_current=False)
    client.conf.gaffer_database_url = postgres_url
    module = write_task_project(tmp_path, redis_url, postgres_url)
    rows = 100_000
    engine = get_engine(parse_database_url(postgres_url))
    with engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO test_items (id, handled) "
                f"SELECT g, 0 FROM generate_series(1, {rows}) g"
            )
        )

    def processed() -> int:
        database = database_for(client)
        cursors = database.models.Cursor
        with database.read() as conn:
            return int(conn.execute(select(cursors.processed)).scalar() or 0)

    with celery_processes() as procs:
        first = worker(tmp_path, module, "w1", "--pool=prefork", "-c", "1")
        procs.append(first)
        first.wait_for_log("ready.")
        client.send_task("tproj.batch", args=["r1"])
        wait_until(lambda: processed() >= 20_000, timeout=120, what="20k rows")
        first.kill(signal.SIGKILL)
        killed_at = processed()
        second = worker(tmp_path, module, "w2", "--pool=prefork", "-c", "1")
        procs.append(second)
        wait_until(
            lambda: "succeeded" in run_states(client, "tproj.batch"),
            timeout=240,
            what="the resumed run",
        )
        # Every delivery after the killed one has its end written (a worker writes a
        # run's end a moment after the task returns) before the workers are stopped.
        wait_until(
            lambda: "running" not in run_states(client, "tproj.batch")[1:],
            timeout=60,
            what="the ends of the later deliveries",
        )
    with engine.connect() as conn:
        counts = dict(
            conn.execute(text("SELECT handled, COUNT(*) FROM test_items GROUP BY handled")).all()
        )
    print(f"killed at {killed_at} rows; handled counts {counts}")
    assert killed_at < rows
    assert counts == {1: rows}
    assert processed() == rows
    states = run_states(client, "tproj.batch")
    assert states[0] == "running"  # the killed delivery (lost, until Beat marks it)
    # One delivery finished the work. A later one is possible: a resumed run longer than
    # the broker's visibility timeout (8 s here) is delivered again; its key makes it
    # a duplicate that does nothing.
    assert states.count("succeeded") == 1
    done = states.index("succeeded")
    assert set(states[1:done]) <= {"retrying"}
    assert set(states[done + 1 :]) <= {"duplicate"}
