"""The run page and the tokens that only read, as a user sees them: `celery -A wproj gaffer
web` (a real uvicorn process on PostgreSQL) in Debian's chromium driven by Playwright."""

from __future__ import annotations

import json
import os
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from celery_gaffer import ScheduleStore, every
from celery_gaffer.store import database_for
from celery_gaffer.store.runs import insert_runs

from .test_web import PROJECT, TOKEN, XSS, browser, consoles, project  # noqa: F401

pytestmark = pytest.mark.acceptance

UTC = timezone.utc
VIEWER = "viewer-token-0123456789"
# The project, reading its named tokens from the environment too.
NAMED = (
    PROJECT
    + """
import json

if os.environ.get("WPROJ_TOKENS"):
    app.conf.gaffer_web_tokens = json.loads(os.environ["WPROJ_TOKENS"])
if os.environ.get("WPROJ_READ_TOKENS"):
    app.conf.gaffer_web_read_tokens = json.loads(os.environ["WPROJ_READ_TOKENS"])
"""
)
TRACEBACK = (
    "Traceback (most recent call last):\n"
    + "".join(
        f'  File "/srv/app/very/long/path/without/breaks/{"x" * 80}/settle_{n}.py", line {n},'
        f" in settle_{n}\n    settle_{n + 1}(invoice_id)\n"
        for n in range(40)
    )
    + f"ConnectionError: bank API timed out {XSS} "
    + "y" * 300
)


def failed_run(store: ScheduleStore) -> int:
    """A failed run of ``invoices-sync`` with its arguments and a long traceback; its id."""
    store.add("invoices-sync", "wproj.settle", every(600))
    now = datetime.now(UTC).replace(microsecond=0)
    database = database_for(store.app)
    row = {
        "task_id": "settle-1",
        "task_name": "wproj.settle",
        "schedule": "invoices-sync",
        "nominal_at": now - timedelta(minutes=10),
        "key": "invoices-sync@" + "k" * 200,
        "attempt": 1,
        "state": "failed",
        "started_at": now - timedelta(minutes=10),
        "finished_at": now - timedelta(minutes=9),
        "duration": 60.0,
        "worker": "celery@web-test",
        "error_type": "ConnectionError",
        "error_message": f"bank API timed out {XSS} " + "y" * 300,
        "args": [11, "z" * 500],
        "kwargs": {"region": XSS},
        "traceback": TRACEBACK,
        "updated_at": now,
    }
    runs = database.models.JobRun
    with database.begin() as conn:
        insert_runs(conn, database.models, [row])
        return int(conn.execute(select(runs.id).where(runs.task_id == "settle-1")).scalar_one())


def test_in_a_browser_a_failed_runs_page_shows_its_traceback_without_overflow(
    project: ScheduleStore,  # noqa: F811
    consoles: Any,  # noqa: F811
    browser: Any,  # noqa: F811
    tmp_path: Path,
) -> None:
    run_id = failed_run(project)
    console = consoles("--port", "0")
    shots = Path(os.environ.get("GAFFER_SCREENSHOT_DIR", tmp_path))
    shots.mkdir(parents=True, exist_ok=True)
    for width in (1280, 390):
        context = browser.new_context(viewport={"width": width, "height": 800})
        page = context.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda error, errors=errors: errors.append(str(error)))
        page.goto(console.url + "runs")
        page.click(f'a[href="/runs/{run_id}"]')
        page.wait_for_load_state()
        assert page.url.endswith(f"/runs/{run_id}")
        assert page.locator("#run-state").inner_text().strip() == "failed"
        assert page.locator("#run-traceback").inner_text().strip() == TRACEBACK.strip()
        assert XSS in page.locator("#run-kwargs").inner_text()
        assert page.locator("#run-schedule a").get_attribute("href") == "/schedules/invoices-sync"
        overflow = page.evaluate("document.documentElement.scrollWidth <= innerWidth")
        assert overflow, f"the run page runs past the right edge at {width} px"
        suffix = "" if width == 1280 else "-phone"
        page.screenshot(path=str(shots / f"web-run-long{suffix}.png"), full_page=True)
        assert errors == []
        context.close()


def test_in_a_browser_a_read_token_logs_in_reads_and_may_not_pause(
    project: ScheduleStore,  # noqa: F811
    consoles: Any,  # noqa: F811
    browser: Any,  # noqa: F811
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    (tmp_path / "wproj.py").write_text(NAMED)
    monkeypatch.setenv("WPROJ_TOKENS", json.dumps({"alice": TOKEN}))
    monkeypatch.setenv("WPROJ_READ_TOKENS", json.dumps({"viewer": VIEWER}))
    project.add("nightly-report", "wproj.report", every(3600))
    console = consoles("--port", "0")
    assert console.get("api/schedules").status_code == 401
    headers = {"Authorization": f"Bearer {VIEWER}"}
    assert console.get("api/schedules", headers=headers).status_code == 200
    assert console.post("api/schedules/nightly-report/pause", headers=headers).status_code == 403
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    page = context.new_page()
    page.goto(console.url + "schedules/nightly-report")
    assert page.url.endswith("/login")  # reading needs a login
    page.fill("input[name=token]", VIEWER)
    page.click("#login")
    page.wait_for_load_state()
    page.goto(console.url + "schedules/nightly-report")
    assert page.locator("#reader-note").inner_text() == "Your token may only read."
    assert page.locator("#pause").count() == 0
    assert project.get("nightly-report").enabled
    context.close()
