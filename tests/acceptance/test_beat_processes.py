"""Real `celery beat -S gaffer` and `celery worker` processes, PostgreSQL and Redis."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections import Counter
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from celery import Celery
from sqlalchemy import select

from celery_gaffer import ScheduleStore, every
from celery_gaffer.protocol import fire_key, fire_task_id
from celery_gaffer.store import database_for

from ..processes import CeleryProcess, celery_processes, project_env
from ..support import message_headers
from .project import deliveries, write_project

SCHEDULES = 10
RUN_SECONDS = 30


def _app(broker: str, database: str) -> Celery:
    app = Celery("proj", broker=broker, set_as_current=False)
    app.conf.gaffer_database_url = database

    @app.task(name="proj.record", shared=False)
    def record(*args: object, **kwargs: object) -> None:
        return None

    return app


def _expected_keys(app: Celery, created: dict[str, datetime], until: datetime) -> set[str]:
    keys = set()
    for name, start in created.items():
        keys |= {fire_key(name, f) for f in every(1).fires_between(start, until)}
    return keys


def _ledger_publish_counts(app: Celery) -> dict[str, int]:
    database = database_for(app)
    fire = database.models.Fire
    with database.read() as conn:
        return dict(conn.execute(select(fire.task_id, fire.publish_count)).all())  # type: ignore[arg-type]


def _run_two_beats(
    tmp_path: Path, postgres_url: str, redis_url: str, kill_one: bool
) -> tuple[Celery, set[str], list[tuple[str, str | None, str | None]]]:
    module = write_project(
        tmp_path, redis_url, postgres_url, extra="app.conf.gaffer_republish_after = 3"
    )
    app = _app(redis_url, postgres_url)
    store = ScheduleStore(app)
    created = {}
    for n in range(SCHEDULES):
        stored = store.add(
            f"s{n}", "proj.record", every(1), args=[f"s{n}"], gaffer={"catchup": "all"}
        )
        created[stored.name] = stored.watermark_at
    with celery_processes() as procs:
        worker = CeleryProcess(
            tmp_path, module, ["worker", "--pool=threads", "-c", "8", "--loglevel=INFO"], "worker"
        )
        procs.append(worker)
        beats = [
            CeleryProcess(
                tmp_path,
                module,
                ["beat", "-S", "gaffer", "--loglevel=INFO", "-s", str(tmp_path / f"b{i}")],
                f"beat{i}",
            )
            for i in range(2)
        ]
        procs.extend(beats)
        for beat in beats:
            beat.wait_for_log("beat: Starting...")
        worker.wait_for_log("ready.")
        time.sleep(RUN_SECONDS / 2)
        if kill_one:
            beats[0].kill(signal.SIGKILL)
        time.sleep(RUN_SECONDS / 2)
        window_end = datetime.now(timezone.utc) - timedelta(seconds=2)
        for beat in beats:
            beat.stop()
        time.sleep(5)  # let the worker drain the queue
        beat_logs = [beat.log() for beat in beats]
    if kill_one:
        assert "sent s" in beat_logs[1]
    return app, _expected_keys(app, created, window_end), deliveries(postgres_url)


@pytest.mark.acceptance
def test_two_beats_deliver_every_fire_exactly_once(
    tmp_path: Path, postgres_url: str, redis_url: str
) -> None:
    _app_used, expected, delivered = _run_two_beats(
        tmp_path, postgres_url, redis_url, kill_one=False
    )
    counts = Counter(task_id for task_id, _key, _label in delivered)
    expected_ids = {fire_task_id(key) for key in expected}
    missing = expected_ids - set(counts)
    duplicates = {task_id: n for task_id, n in counts.items() if n > 1}
    print(
        f"fires expected {len(expected_ids)}, delivered {len(counts)}, "
        f"missing {len(missing)}, duplicated {len(duplicates)}"
    )
    assert len(expected_ids) >= SCHEDULES * (RUN_SECONDS - 5)
    assert missing == set()
    assert duplicates == {}


@pytest.mark.acceptance
def test_a_beat_killed_half_way_loses_nothing(
    tmp_path: Path, postgres_url: str, redis_url: str
) -> None:
    app, expected, delivered = _run_two_beats(tmp_path, postgres_url, redis_url, kill_one=True)
    counts = Counter(task_id for task_id, _key, _label in delivered)
    expected_ids = {fire_task_id(key) for key in expected}
    missing = expected_ids - set(counts)
    publish_counts = _ledger_publish_counts(app)
    repeated = {task_id for task_id, n in counts.items() if n > 1}
    republished = {task_id for task_id, n in publish_counts.items() if n > 1}
    print(
        f"fires expected {len(expected_ids)}, missing {len(missing)}, "
        f"repeated {len(repeated)}, republished {len(republished)}"
    )
    assert missing == set()
    assert repeated <= republished
    assert len(republished) <= SCHEDULES * 2  # at most the fires in flight at the kill


def _gaffer_cli(tmp_path: Path, module: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "celery", "-A", module, "gaffer", *args],
        cwd=tmp_path,
        env=project_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=60,
    )


def _sends(redis_url: str, name: str) -> list[datetime]:
    return [
        datetime.strptime(h["gaffer_nominal_at"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc)
        for h in message_headers(redis_url)
        if h.get("gaffer_schedule") == name
    ]


def _wait_until(predicate, timeout: float = 15.0) -> float:  # type: ignore[no-untyped-def]
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        if predicate():
            return time.monotonic() - start
        time.sleep(0.2)
    raise AssertionError("condition not met in time")


@pytest.mark.acceptance
def test_cli_add_edit_pause_resume_remove_take_effect_while_beat_runs(
    tmp_path: Path, postgres_url: str, redis_url: str
) -> None:
    module = write_project(tmp_path, redis_url, postgres_url)
    with celery_processes() as procs:
        beat = CeleryProcess(
            tmp_path,
            module,
            ["beat", "-S", "gaffer", "--loglevel=INFO", "-s", str(tmp_path / "b")],
            "beat",
        )
        procs.append(beat)
        beat.wait_for_log("beat: Starting...")
        time.sleep(1)

        added = _gaffer_cli(
            tmp_path, module, "add", "live", "proj.record", "--every", "60", "--args", '["live"]'
        )
        assert added.returncode == 0, added.stderr
        edited = _gaffer_cli(
            tmp_path, module, "add", "live", "proj.record", "--every", "1", "--replace"
        )
        assert edited.returncode == 0, edited.stderr
        # One tick is at most max_interval (5 s) away.
        _wait_until(lambda: len(_sends(redis_url, "live")) >= 2, timeout=8)

        assert _gaffer_cli(tmp_path, module, "pause", "live").returncode == 0
        time.sleep(1.5)
        paused_at = len(_sends(redis_url, "live"))
        time.sleep(3)
        assert len(_sends(redis_url, "live")) == paused_at

        assert _gaffer_cli(tmp_path, module, "resume", "live").returncode == 0
        _wait_until(lambda: len(_sends(redis_url, "live")) > paused_at + 1, timeout=8)

        listed = _gaffer_cli(tmp_path, module, "schedules", "--json")
        assert json.loads(listed.stdout.splitlines()[0])["name"] == "live"

        assert _gaffer_cli(tmp_path, module, "remove", "live").returncode == 0
        time.sleep(1.5)
        removed_at = len(_sends(redis_url, "live"))
        time.sleep(3)
        assert len(_sends(redis_url, "live")) == removed_at
        assert "Traceback" not in beat.log()
    sends = _sends(redis_url, "live")
    assert len(sends) == len(set(sends))  # never the same fire twice


@pytest.mark.acceptance
@pytest.mark.parametrize(
    ("args", "field"),
    [
        (["add", "x", "proj.nope", "--every", "5"], "task"),
        (["add", "x", "proj.record", "--cron", "0 3 * * *", "--tz", "Mars/Olympus"], "tz"),
        (["add", "x", "proj.record", "--cron", "61 * * * *"], "expr"),
        (["add", "x", "proj.record", "--every", "5", "--kwargs", '{"a": NaN}'], "kwargs"),
        (["add", "x" * 201, "proj.record", "--every", "5"], "name"),
        (["add", "x", "proj.record", "--every", "0"], "interval"),
    ],
)
def test_bad_cli_input_is_refused_and_writes_nothing(
    tmp_path: Path, sqlite_url: str, args: list[str], field: str
) -> None:
    module = write_project(tmp_path, "memory://", sqlite_url)
    result = _gaffer_cli(tmp_path, module, *args)
    assert result.returncode != 0
    assert field in result.stderr
    assert "Traceback" not in result.stderr
    assert ScheduleStore(_app("memory://", sqlite_url), check_tasks=False).list() == []
