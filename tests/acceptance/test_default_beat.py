"""``every(1)`` in a plain ``beat_schedule`` with Celery's own scheduler, in a real
``celery beat`` process sending to Redis."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import time
import uuid
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest
import redis

pytestmark = [pytest.mark.acceptance, pytest.mark.redis]

ROOT = Path(__file__).resolve().parents[2]
MODULE = "default_beat_app"
TASK = f"{MODULE}.tick"
RUN_SECONDS = 5.0
STARTUP_TIMEOUT = 30.0

APP_SOURCE = """
import time
import uuid
from itertools import pairwise

from celery import Celery
from celery.beat import BeatLazyFunc

from celery_gaffer.schedules import every

app = Celery({module!r}, broker={broker!r})
app.conf.beat_schedule = {{
    "tick": {{
        "task": {task!r},
        "schedule": every(1),
        # Evaluated by Beat at send time: when each message really left.
        "kwargs": {{"sent_at": BeatLazyFunc(time.time)}},
    }},
}}
app.conf.beat_schedule_filename = {schedule_file!r}
app.conf.beat_max_loop_interval = 1
# Kombu's Redis transport keeps a queue's messages in a list named after it; a queue of
# this test's own keeps a concurrent run on the same Redis database out of the count.
app.conf.task_default_queue = {queue!r}
"""


def _queued(client: redis.Redis, queue: str) -> list[dict[str, Any]]:
    """The task messages in ``queue``, by send time."""
    messages = []
    for raw in client.lrange(queue, 0, -1):
        envelope = json.loads(raw)
        args, kwargs, _embed = json.loads(base64.b64decode(envelope["body"]))
        messages.append({"headers": envelope["headers"], "args": args, "kwargs": kwargs})
    return sorted(messages, key=lambda m: m["kwargs"]["sent_at"])


def test_every_one_second_with_celerys_default_scheduler(tmp_path: Path, redis_url: str) -> None:
    queue = f"gaffer-default-beat-{uuid.uuid4().hex}"
    (tmp_path / f"{MODULE}.py").write_text(
        APP_SOURCE.format(
            module=MODULE,
            broker=redis_url,
            task=TASK,
            schedule_file=str(tmp_path / "celerybeat-schedule"),
            queue=queue,
        )
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])}
    log = (tmp_path / "beat.log").open("w+")
    client = redis.Redis.from_url(redis_url)
    beat = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", MODULE, "beat", "--loglevel=INFO"],
        cwd=tmp_path,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        # Wait for the first send (start-up time varies), then watch it for RUN_SECONDS.
        deadline = time.monotonic() + STARTUP_TIMEOUT
        while client.llen(queue) == 0:
            assert beat.poll() is None, "celery beat exited early"
            assert time.monotonic() < deadline, "celery beat sent nothing"
            time.sleep(0.1)
        time.sleep(RUN_SECONDS)
    finally:
        beat.terminate()
        try:
            beat.wait(timeout=15)
        except subprocess.TimeoutExpired:
            beat.kill()
            beat.wait()
        client.close()
    log.seek(0)
    output = log.read()
    log.close()

    with redis.Redis.from_url(redis_url) as reader:
        messages = _queued(reader, queue)
        reader.delete(queue)
    assert "Traceback" not in output, output
    assert len(messages) >= 4, output
    assert {m["headers"]["task"] for m in messages} == {TASK}
    assert all(m["headers"]["eta"] is None for m in messages)
    # Beat logs just before it publishes: the terminate may fall between the two.
    logged = output.count(f"Sending due task tick ({TASK})")
    assert len(messages) <= logged <= len(messages) + 1, output

    sent = [m["kwargs"]["sent_at"] for m in messages]
    gaps = [later - earlier for earlier, later in pairwise(sent)]
    assert all(0.5 <= gap <= 2.0 for gap in gaps), gaps
    # On time: every(1) fires on whole seconds; Beat sleeps until each one.
    late_by = sorted(s % 1.0 for s in sent)
    assert late_by[len(late_by) // 2] < 0.5, late_by
