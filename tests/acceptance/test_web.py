"""`celery -A proj gaffer web` as a user runs it: a real uvicorn process on PostgreSQL,
looked at over HTTP and in Debian's chromium driven by Playwright.

Screenshots go to ``GAFFER_SCREENSHOT_DIR`` (default: the test's folder); docs/how-to/img's
web-schedules, web-detail, web-runs, web-run, web-alerts and web-overview-dark.png come
from this test (the others from test_web_overview.py and test_web_governance.py).
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from celery import Celery
from sqlalchemy import select, text

from celery_gaffer import ScheduleStore, cron, every
from celery_gaffer.store import database_for
from celery_gaffer.store.beats import heartbeat
from celery_gaffer.store.runs import insert_runs
from celery_gaffer.store.schedules import update_schedule_facts

from ..processes import ROOT, CeleryProcess, celery_processes, project_env
from ..services import service_missing
from ..support import FrozenClock

pytestmark = pytest.mark.acceptance

UTC = timezone.utc
TOKEN = "s3cret-console-token"
XSS = "<script>alert(1)</script>"
PROJECT = """
import os
from celery import Celery

app = Celery("wproj", broker="memory://")
app.conf.gaffer_database_url = os.environ["WPROJ_DATABASE"]
if os.environ.get("WPROJ_TOKEN"):
    app.conf.gaffer_web_token = os.environ["WPROJ_TOKEN"]


@app.task(name="wproj.report")
def report():
    return None


@app.task(name="wproj.settle")
def settle(invoice_id):
    return None
"""
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
#: The traceback the seeded failed runs of invoices-sync recorded (the run page shows it).
SETTLE_TRACEBACK = """Traceback (most recent call last):
  File "/srv/app/.venv/lib/python3.12/site-packages/celery/app/trace.py", line 453, in trace_task
    R = retval = fun(*args, **kwargs)
  File "/srv/app/wproj/tasks.py", line 41, in settle
    statement = bank.fetch_statement(invoice_id)
  File "/srv/app/wproj/bank.py", line 88, in fetch_statement
    response = self.session.get(self.url + f"/statements/{invoice_id}", timeout=30)
  File "/srv/app/wproj/bank.py", line 23, in get
    raise ConnectionError("bank API timed out")
ConnectionError: bank API timed out"""
STARTED = re.compile(r"Gaffer console on (http://\S+/) \((read-only|actions need the token)\)")


class Console:
    """A running ``celery -A wproj gaffer web`` and the URL it printed."""

    def __init__(self, process: CeleryProcess) -> None:
        self.process = process
        process.wait_for_log("Gaffer console on ")
        found = STARTED.search(process.log())
        assert found, process.log()
        self.url = found.group(1)
        self.line = found.group(0)
        self.port = int(self.url.rsplit(":", 1)[1].strip("/"))

    def get(self, path: str, **kwargs: Any) -> httpx.Response:
        return httpx.get(self.url + path.lstrip("/"), timeout=10, **kwargs)

    def post(self, path: str, **kwargs: Any) -> httpx.Response:
        return httpx.post(self.url + path.lstrip("/"), timeout=10, **kwargs)


@pytest.fixture
def project(tmp_path: Path, postgres_url: str, monkeypatch: pytest.MonkeyPatch) -> ScheduleStore:
    """The project file, its environment, and a store to seed its database with."""
    (tmp_path / "wproj.py").write_text(PROJECT)
    # A password that PostgreSQL's trust authentication ignores: it must never be shown.
    monkeypatch.setenv("WPROJ_DATABASE", postgres_url.replace("postgres@", "postgres:pw-123@"))
    monkeypatch.delenv("WPROJ_TOKEN", raising=False)
    monkeypatch.delenv("GAFFER_WEB_TOKEN", raising=False)
    app = Celery("seed", broker="memory://", set_as_current=False)
    app.conf.gaffer_database_url = postgres_url
    return ScheduleStore(app, check_tasks=False)


@pytest.fixture
def consoles(tmp_path: Path) -> Iterator[Any]:
    """Start consoles with ``consoles(*args)``; each is stopped at the end."""
    with celery_processes() as started:

        def start(*args: str, name: str = "web") -> Console:
            process = CeleryProcess(tmp_path, "wproj", ["gaffer", "web", *args], name)
            started.append(process)
            return Console(process)

        yield start


def seed(store: ScheduleStore) -> None:
    """A London schedule (DST notes), a late one, a failing one with runs, and the name a
    careless page would run as a script."""
    now = datetime.now(UTC)
    store.add("nightly-report", "wproj.report", cron("30 1 * * *", "Europe/London"))
    # 01:30 on the last Sunday of March and of October: the nights London's clocks change.
    store.add("clock-change-audit", "wproj.report", cron("30 1 * 3,10 0L", "Europe/London"))
    store.add(XSS, "wproj.report", every(3600))
    store.add("invoices-sync", "wproj.settle", every(600), kwargs={"invoice_id": 11})
    ScheduleStore(store.app, check_tasks=False, clock=FrozenClock(now - timedelta(hours=2))).add(
        "bank-feed", "wproj.report", every(900)
    )
    database = database_for(store.app)
    run = {
        "task_name": "wproj.settle",
        "schedule": "invoices-sync",
        "attempt": 1,
        "worker": "celery@web-test",
        "updated_at": now,
    }
    runs = []
    for number in range(4):
        nominal = (now - timedelta(minutes=10 * (4 - number))).replace(second=0, microsecond=0)
        failed = number > 0
        runs.append(
            {
                **run,
                "task_id": f"task-{number}",
                "nominal_at": nominal,
                "key": f"invoices-sync@{nominal:%Y-%m-%dT%H:%M:%SZ}",
                "state": "failed" if failed else "succeeded",
                "started_at": nominal,
                "finished_at": nominal + timedelta(seconds=3),
                "updated_at": nominal + timedelta(seconds=3),  # when the run ended
                "duration": 3.0,
                "items": None if failed else 250,
                "fence": 40 + number,  # of the schedule's overlap lease
                "error_type": "ConnectionError" if failed else None,
                "error_message": "bank API timed out" if failed else None,
                "args": [],
                "kwargs": {"invoice_id": 11},
                "traceback": SETTLE_TRACEBACK if failed else None,
            }
        )
    with database.begin() as conn:
        insert_runs(conn, database.models, runs)
        for row in runs:  # what the run recorder folds into the schedule's health facts
            update_schedule_facts(
                conn, database.models, "invoices-sync", row["state"], row["nominal_at"]
            )


def listening_addresses(port: int) -> set[str]:
    """The local addresses of every TCP socket listening on ``port`` (from /proc)."""
    found = set()
    for table, width in (("/proc/net/tcp", 8), ("/proc/net/tcp6", 32)):
        if not os.path.exists(table):
            continue
        with open(table) as lines:
            next(lines)
            for line in lines:
                fields = line.split()
                address, hex_port = fields[1].split(":")
                if fields[3] == "0A" and int(hex_port, 16) == port:  # 0A: LISTEN
                    raw = bytes.fromhex(address)
                    # /proc shows each 32-bit word in host (little-endian) order.
                    words = [raw[i : i + 4][::-1] for i in range(0, width // 2, 4)]
                    packed = b"".join(words)
                    family = socket.AF_INET if width == 8 else socket.AF_INET6
                    found.add(socket.inet_ntop(family, packed))
    return found


def test_it_listens_on_loopback_only_and_never_shows_the_database_password(
    project: ScheduleStore, consoles: Any
) -> None:
    project.add("nightly-report", "wproj.report", cron("30 1 * * *", "Europe/London"))
    console = consoles("--port", "0")
    assert console.url.startswith("http://127.0.0.1:")
    assert listening_addresses(console.port) == {"127.0.0.1"}
    assert "(read-only)" in console.line
    assert "postgres:***@" in console.process.log()
    assert "pw-123" not in console.process.log()
    listed = console.get("/api/schedules")
    assert listed.status_code == 200
    assert [row["name"] for row in listed.json()] == ["nightly-report"]
    # A DNS-rebinding page reaches 127.0.0.1 with its own host name: refused.
    assert console.get("/api/schedules", headers={"Host": "evil.example"}).status_code == 400
    for path in ("/schedules", "/schedules/nightly-report", "/runs", "/alerts", "/api/alerts"):
        body = console.get(path).text
        assert "pw-123" not in body, path
        assert "127.0.0.1:5432" not in body, path


def test_another_host_is_asked_for_and_warned_about(project: ScheduleStore, consoles: Any) -> None:
    console = consoles("--host", "0.0.0.0", "--port", "0")
    assert listening_addresses(console.port) == {"0.0.0.0"}
    warnings = [line for line in console.process.log().splitlines() if "warning" in line]
    assert len(warnings) == 1
    assert "reachable from the network" in warnings[0]


def test_a_read_only_console_refuses_every_action(project: ScheduleStore, consoles: Any) -> None:
    project.add("nightly-report", "wproj.report", cron("30 1 * * *", "Europe/London"))
    console = consoles("--port", "0")
    for path in (
        "/api/schedules/nightly-report/pause",
        "/api/schedules/nightly-report/trigger",
        "/schedules/nightly-report/pause",
    ):
        refused = console.post(path, headers={"Authorization": f"Bearer {TOKEN}"})
        assert refused.status_code == 403, path
        assert "this console is read-only" in refused.text, path
    detail = console.get("/schedules/nightly-report").text
    assert 'id="pause"' not in detail  # no action forms, and a note saying why
    assert "this console is read-only: set gaffer_web_token" in detail
    stored = project.get("nightly-report")
    assert stored.enabled
    assert console.get("/api/schedules/nightly-report").json()["state"] == "ok"
    with database_for(project.app).read() as conn:
        fires = conn.execute(text("SELECT count(*) FROM gaffer_fires")).scalar()
    assert fires == 0  # the refused trigger sent nothing


def test_the_api_needs_the_bearer_token(
    project: ScheduleStore, consoles: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    project.add("nightly-report", "wproj.report", cron("30 1 * * *", "Europe/London"))
    monkeypatch.setenv("GAFFER_WEB_TOKEN", TOKEN)
    console = consoles("--port", "0")
    assert "(actions need the token)" in console.line
    path = "/api/schedules/nightly-report/pause"
    assert console.post(path).status_code == 401
    assert console.post(path, headers={"Authorization": "Bearer wrong"}).status_code == 401
    assert project.get("nightly-report").enabled
    paused = console.post(path, headers={"Authorization": f"Bearer {TOKEN}"})
    assert paused.status_code == 200, paused.text
    assert not project.get("nightly-report").enabled
    assert console.get("/api/schedules/nightly-report").json()["state"] == "paused"
    for path in ("/schedules", "/api/schedules", "/schedules/nightly-report"):
        assert TOKEN not in console.get(path).text


def test_the_docs_curl_examples_run(
    project: ScheduleStore, consoles: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every ``curl`` line of docs/how-to/web.md, run by bash against a real console
    (only the port differs), answers 2xx; the pause and resume ones did what they say."""
    seed(project)
    monkeypatch.setenv("GAFFER_WEB_TOKEN", TOKEN)
    console = consoles("--port", "0")
    docs = (ROOT / "docs" / "how-to" / "web.md").read_text()
    blocks = re.findall(r"^```bash\n(.*?)^```", docs, re.DOTALL | re.MULTILINE)
    commands = [line for block in blocks for line in block.splitlines() if line.startswith("curl")]
    assert len(commands) >= 5
    for command in commands:
        assert "127.0.0.1:5557" in command, command
        done = subprocess.run(
            ["bash", "-c", command.replace("127.0.0.1:5557", f"127.0.0.1:{console.port}")],
            capture_output=True,
            text=True,
            timeout=30,
            env={**os.environ, "GAFFER_WEB_TOKEN": TOKEN},
        )
        assert done.returncode == 0, (command, done.stdout, done.stderr)
    assert project.get("nightly-report").enabled  # paused, then resumed


def test_an_unmigrated_database_is_one_line(
    tmp_path: Path, empty_postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "wproj.py").write_text(PROJECT)
    monkeypatch.setenv("WPROJ_DATABASE", empty_postgres_url)
    done = subprocess.run(
        [sys.executable, "-m", "celery", "-A", "wproj", "gaffer", "web", "--port", "0"],
        cwd=tmp_path,
        env=project_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1
    assert done.stderr.startswith("error: ")
    assert "migrate" in done.stderr


def test_without_the_web_extra_it_says_how_to_install_it(tmp_path: Path) -> None:
    (tmp_path / "wproj.py").write_text(PROJECT)
    # ``None`` in sys.modules is how Python spells "this module cannot be imported".
    script = (
        "import sys; sys.modules['starlette'] = None; "
        "sys.argv = ['celery', '-A', 'wproj', 'gaffer', 'web']; "
        "from celery.__main__ import main; main()"
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=tmp_path,
        env=project_env(tmp_path, WPROJ_DATABASE="sqlite:///never-opened.sqlite3"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert done.stderr == (
        "error: the web console needs the web extra: pip install 'celery-gaffer[web]'\n"
    )
    assert not (tmp_path / "never-opened.sqlite3").exists()


def test_a_port_in_use_is_one_line(project: ScheduleStore, consoles: Any, tmp_path: Path) -> None:
    console = consoles("--port", "0")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "wproj",
            "gaffer",
            "web",
            "--port",
            f"{console.port}",
        ],
        cwd=tmp_path,
        env=project_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert done.stderr == (
        f"error: cannot listen on http://127.0.0.1:{console.port}/: Address already in use\n"
    )


# -- in a real browser ----------------------------------------------------------------


@pytest.fixture
def browser() -> Iterator[Any]:
    try:
        from playwright.sync_api import sync_playwright
    except ImportError as exc:
        service_missing("Playwright", "pip install playwright", exc)
    executable = shutil.which("chromium") or shutil.which("chromium-browser")
    if executable is None:
        service_missing("Chromium", "/usr/bin/chromium", FileNotFoundError("apt install chromium"))
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
        try:
            yield launched
        finally:
            launched.close()


def test_in_a_browser_log_in_pause_and_see_it_paused(
    project: ScheduleStore,
    consoles: Any,
    browser: Any,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    seed(project)
    monkeypatch.setenv("WPROJ_TOKEN", TOKEN)  # through app.conf.gaffer_web_token
    console = consoles("--port", "0")
    shots = Path(os.environ.get("GAFFER_SCREENSHOT_DIR", tmp_path))
    shots.mkdir(parents=True, exist_ok=True)
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    page = context.new_page()
    dialogs: list[str] = []
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))

    # A wrong token gets no session.
    page.goto(console.url + "login")
    page.fill("input[name=token]", "not-the-token")
    page.click("#login")
    assert not [c for c in context.cookies() if c["name"] == "gaffer_session"]

    page.goto(console.url + "login")
    page.fill("input[name=token]", TOKEN)
    page.click("#login")
    page.wait_for_load_state()
    (session,) = [c for c in context.cookies() if c["name"] == "gaffer_session"]
    assert session["httpOnly"]
    assert session["sameSite"] == "Strict"
    assert TOKEN not in session["value"]

    page.goto(console.url + "schedules")
    row = page.locator('tr[data-schedule="nightly-report"]')
    assert row.locator("td.state").inner_text().strip() == "ok"
    assert "Europe/London" in row.locator("td.zone").inner_text()
    # The script-like name is text: its cell reads as the name, and nothing ran.
    hostile = page.locator(f'tr[data-schedule="{XSS}"]')
    assert hostile.locator("td.name").inner_text().strip() == XSS
    assert page.locator("#schedules").inner_text().count(XSS) == 1
    page.screenshot(path=str(shots / "web-schedules.png"), full_page=True)

    # The next fires on London's clock and in UTC, with what each clock change does.
    page.goto(console.url + "schedules/clock-change-audit")
    detail = page.locator("body").inner_text()
    assert "2027-03-28 02:00 BST (01:00Z)" in detail
    assert "01:30 does not exist: fires once, at the gap's end" in detail
    assert "01:30 happens twice: fires once, at the first occurrence" in detail
    page.screenshot(path=str(shots / "web-detail.png"), full_page=True)

    page.goto(console.url + "schedules/nightly-report")
    assert page.locator("#state").inner_text().strip() == "ok"
    assert "GMT (01:30Z)" in page.locator("body").inner_text()
    page.click("#pause")
    if page.locator("#confirm").count():
        page.click("#confirm")
    page.wait_for_load_state()
    assert page.url.rstrip("/").endswith("/schedules/nightly-report")
    assert page.locator("#state").inner_text().strip() == "paused"
    assert not project.get("nightly-report").enabled

    page.goto(console.url + "schedules")
    state = page.locator('tr[data-schedule="nightly-report"] td.state')
    assert state.inner_text().strip() == "paused"
    assert page.locator('tr[data-schedule="invoices-sync"] td.state').inner_text() == "failing"
    assert page.locator('tr[data-schedule="bank-feed"] td.state').inner_text() == "late"

    page.goto(console.url + "schedules/" + quote(XSS, safe=""))
    assert page.locator("#state").inner_text().strip() == "ok"
    assert XSS in page.locator("body").inner_text()

    page.goto(console.url + "runs")
    runs = page.locator("body").inner_text()
    assert runs.count("ConnectionError: bank API timed out") == 3
    assert "250" in runs  # the items the succeeded run handled
    assert "built-in method" not in runs
    page.screenshot(path=str(shots / "web-runs.png"), full_page=True)
    # The newest failed run's page, with its arguments and traceback.
    database = database_for(project.app)
    runs_table = database.models.JobRun
    with database.read() as conn:
        failed_id = conn.execute(
            select(runs_table.id).where(runs_table.task_id == "task-3")
        ).scalar_one()
    page.click(f'a[href="/runs/{failed_id}"]')
    page.wait_for_load_state()
    assert page.locator("#run-state").inner_text().strip() == "failed"
    assert page.locator("#run-traceback").inner_text().strip() == SETTLE_TRACEBACK
    assert '"invoice_id": 11' in page.locator("#run-kwargs").inner_text()
    page.screenshot(path=str(shots / "web-run.png"), full_page=True)
    page.goto(console.url + "alerts")
    alerts = page.locator("body").inner_text()
    assert "invoices-sync" in alerts
    assert "bank-feed" in alerts
    assert "nightly-report" not in alerts
    page.screenshot(path=str(shots / "web-alerts.png"), full_page=True)

    # The overview in dark mode (prefers-color-scheme: dark), with a Beat that just ticked.
    now = datetime.now(UTC)
    with database.begin() as conn:
        heartbeat(
            conn,
            database.models,
            name="beat-host:4242",
            host="beat-host",
            pid=4242,
            started_at=now - timedelta(hours=3),
            now=now,
        )
    dark = browser.new_context(viewport={"width": 1280, "height": 800}, color_scheme="dark")
    overview = dark.new_page()
    overview.goto(console.url)
    assert overview.evaluate("matchMedia('(prefers-color-scheme: dark)').matches")
    background = overview.evaluate("getComputedStyle(document.body).backgroundColor")
    assert background != "rgb(255, 255, 255)", background
    assert overview.locator('tr[data-beat="beat-host:4242"]').is_visible()
    overview.screenshot(path=str(shots / "web-overview-dark.png"), full_page=True)
    dark.close()

    assert dialogs == []
    assert errors == []
    for name in ("schedules", "detail", "runs", "run", "alerts", "overview-dark"):
        assert (shots / f"web-{name}.png").read_bytes()[:4] == b"\x89PNG"
    context.close()
