"""Push alerts from real ``celery beat -S gaffer`` processes (and a real worker).

A real HTTP receiver on 127.0.0.1 records each POST (answering the first one 500); each
change of health arrives once although two Beats check the same PostgreSQL database.
Receivers that answer slowly, endlessly or with a redirect never hold Beat's tick.
"""

from __future__ import annotations

import itertools
import json
import signal
import socket
import threading
import time
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
from celery import Celery
from sqlalchemy import select

from celery_gaffer import ScheduleStore, every
from celery_gaffer.store import database_for
from celery_gaffer.store.models import table_of

from ..integration.beat.test_alert_webhook import Receiver
from ..processes import CeleryProcess, celery_processes
from ..receivers import Answer, RawReceiver, Request, endless_body, redirect, slow, status
from .runs_project import write_runs_project

pytestmark = pytest.mark.acceptance


def _stub() -> None:
    return None


def test_two_beats_post_each_change_once_after_a_failed_first_post(
    tmp_path: Path, postgres_url: str, redis_url: str
) -> None:
    receiver = Receiver()
    receiver.fail_next = 1
    module = write_runs_project(tmp_path, redis_url, postgres_url)
    project = tmp_path / f"{module}.py"
    setting = f"app.conf.gaffer_alert_webhook_url = {receiver.url()!r}\n"
    install = "celery_gaffer.install(app)"
    project.write_text(project.read_text().replace(install, setting + install))
    app = Celery("rproj", broker=redis_url, set_as_current=False)
    app.conf.gaffer_database_url = postgres_url
    for name in ("rproj.flaky", "rproj.plain"):
        app.task(name=name, shared=False)(_stub)
    flag = tmp_path / "broken.flag"
    flag.write_text("broken")
    store = ScheduleStore(app)
    store.add(
        "orphan", "rproj.plain", every(1), options={"queue": "nobody-listens"}, gaffer={"grace": 2}
    )
    store.add("flaky", "rproj.flaky", every(1), gaffer={"grace": 30})

    def delivered() -> Counter[tuple[str, str]]:
        return Counter((a["schedule"], a["state"]) for a in receiver.delivered)

    def wait_for(wanted: set[tuple[str, str]], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if wanted <= set(delivered()):
                return
            time.sleep(0.2)
        raise AssertionError(f"timed out; delivered so far {receiver.requests}")

    try:
        with celery_processes() as procs:
            for i in range(2):
                procs.append(
                    CeleryProcess(
                        tmp_path,
                        module,
                        ["beat", "-S", "gaffer", "--loglevel=INFO", "-s", str(tmp_path / f"b{i}")],
                        f"beat{i}",
                    )
                )
            worker = CeleryProcess(
                tmp_path, module, ["worker", "--pool=solo", "--loglevel=INFO"], "w"
            )
            procs.append(worker)
            worker.wait_for_log("ready.")
            wait_for({("orphan", "late"), ("flaky", "failing")}, 60)
            flag.unlink()  # fix the job
            wait_for({("flaky", "ok")}, 40)
            time.sleep(3)  # both Beats keep checking: nothing more arrives
            logs = [process.log() for process in procs[:2]]
    finally:
        receiver.stop()

    assert delivered() == {("orphan", "late"): 1, ("flaky", "failing"): 1, ("flaky", "ok"): 1}
    assert [r["status"] for r in receiver.requests].count(500) == 1
    assert len(receiver.requests) == 4  # the failed POST was retried once
    assert all("s3cret" not in log and "tok-secret" not in log for log in logs)
    assert any(f"not delivered to http://127.0.0.1:{receiver.port}/***" in log for log in logs)


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def _mixed_answers(other_url: str, stop: threading.Event) -> Answer:
    """Answer each alert by its schedule's name: in 4 s, with an endless body, or with a
    redirect to another origin."""
    answers = {
        "slow": slow(4.0),
        "endless": endless_body(stop),
        "redirect": redirect(other_url),
    }

    def answer(request: Request, sock: socket.socket) -> None:
        kind = json.loads(request.body)["schedule"].partition("-")[0]
        answers[kind](request, sock)

    return answer


def test_a_slow_an_endless_and_a_redirecting_receiver_never_hold_beat(
    tmp_path: Path, postgres_url: str, redis_url: str
) -> None:
    stop = threading.Event()
    other = RawReceiver(status(200))
    receiver = RawReceiver(_mixed_answers(other.url("/steal"), stop))
    module = write_runs_project(tmp_path, redis_url, postgres_url)
    project = tmp_path / f"{module}.py"
    url = receiver.url("/alerts?token=tok-secret", user="hook:s3cret-pw@")
    setting = f"app.conf.gaffer_alert_webhook_url = {url!r}\n"
    install = "celery_gaffer.install(app)"
    project.write_text(project.read_text().replace(install, setting + install))
    app = Celery("rproj", broker=redis_url, set_as_current=False)
    app.conf.gaffer_database_url = postgres_url
    app.task(name="rproj.plain", shared=False)(_stub)
    store = ScheduleStore(app)
    nowhere = {"queue": "nobody-listens"}  # no worker: these turn late and stay late
    store.add("every-second", "rproj.plain", every(1), options=nowhere)
    kinds = ["slow"] * 5 + ["endless"] * 4 + ["redirect"] * 4
    for index, kind in enumerate(kinds):
        store.add(f"{kind}-{index}", "rproj.plain", every(2), options=nowhere, gaffer={"grace": 1})
    database = database_for(app)
    fires, alerts = table_of(database.models.Fire), table_of(database.models.Alert)

    def sent_times() -> list[datetime]:
        with database.read() as conn:
            query = (
                select(fires.c.sent_at)
                .where(fires.c.schedule == "every-second", fires.c.sent_at.is_not(None))
                .order_by(fires.c.nominal_at)
            )
            return list(conn.execute(query).scalars())

    def outbox() -> dict[str, dict[str, Any]]:
        with database.read() as conn:
            return {row.schedule: row._asdict() for row in conn.execute(select(alerts))}

    rss: list[float] = []
    try:
        with celery_processes() as procs:
            beat = CeleryProcess(
                tmp_path,
                module,
                ["beat", "-S", "gaffer", "--loglevel=INFO", "-s", str(tmp_path / "b")],
                "beat",
            )
            procs.append(beat)
            beat.wait_for_log("beat: Starting")
            started = datetime.now(timezone.utc)
            deadline = time.monotonic() + 35
            while time.monotonic() < deadline:
                rss.append(_rss_mb(beat.pid))
                if rss[-1] > 300:
                    break  # failed already: stop before it takes the machine's memory
                time.sleep(0.5)
            # A POST may be under way (a slow receiver, a retried redirect): SIGTERM does
            # not wait for it.
            stopping = time.monotonic()
            beat.kill(signal.SIGTERM)
            beat.process.wait(10)
            stopped_in = time.monotonic() - stopping
            log = beat.log()
    finally:
        stop.set()
        receiver.stop()
        other.stop()

    assert max(rss) < 300, f"Beat's RSS reached {max(rss):.0f} MB"
    sent = [at for at in sent_times() if at > started]
    assert len(sent) >= 25
    gaps = [(b - a).total_seconds() for a, b in itertools.pairwise(sent)]
    assert max(gaps) < 3, f"every(1) sends up to {max(gaps):.1f} s apart"
    rows = outbox()
    assert set(rows) == {f"{kind}-{index}" for index, kind in enumerate(kinds)}
    for name, row in rows.items():
        if name.startswith("redirect"):
            assert row["sent_at"] is None, row
            assert "302" in row["last_error"], row
        else:
            assert row["sent_at"] is not None, row
    # Nothing went to the other origin, so no credential did; the URL's secrets are in
    # no log line, and each alert went with its Basic authentication.
    assert other.requests == []
    assert all(r.header("Authorization") == "Basic aG9vazpzM2NyZXQtcHc=" for r in receiver.requests)
    assert "s3cret" not in log
    assert "tok-secret" not in log
    assert f"http://127.0.0.1:{other.port}/***" in log  # where the redirect pointed, masked
    assert stopped_in < 5
