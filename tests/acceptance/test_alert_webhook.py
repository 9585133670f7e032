"""Push alerts from two real ``celery beat -S gaffer`` processes and a real worker.

A real HTTP receiver on 127.0.0.1 records each POST (answering the first one 500); each
change of health arrives once although two Beats check the same PostgreSQL database.
"""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

import pytest
from celery import Celery

from celery_gaffer import ScheduleStore, every

from ..integration.beat.test_alert_webhook import Receiver
from ..processes import CeleryProcess, celery_processes
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
    assert any("not delivered to http://hook:***@127.0.0.1" in log for log in logs)
