"""Who changed what, as a team sees it: a real ``celery -A wproj gaffer web`` with named
tokens, the real ``celery gaffer`` CLI and a real ``celery beat -S gaffer`` on PostgreSQL,
read in Debian's chromium driven by Playwright.

Alice pauses one schedule in the browser until a time a few seconds ahead, deploy-bot
pauses another through the API, the OS user and ``--actor ops-oncall`` pause two more
from the CLI; the audit log names each of them and where they acted from, and Beat
resumes Alice's schedule by itself when its pause ends.

Screenshot (``GAFFER_SCREENSHOT_DIR``, default: the test's folder): ``web-audit.png``, in
docs/how-to/web.md.
"""

from __future__ import annotations

import getpass
import json
import os
import subprocess
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from celery_gaffer import ScheduleStore, cron, every

from ..processes import CeleryProcess, celery_processes, project_env
from .test_web import browser, consoles, project  # noqa: F401 - fixtures
from .test_web_run_page import NAMED

pytestmark = [pytest.mark.acceptance, pytest.mark.postgres]

UTC = timezone.utc
ALICE = "alice-token-7d2f9a41c0"
BOT = "deploy-bot-token-51e8b3"
A, B, C, D = "nightly-report", "invoices-sync", "bank-feed", "ledger-close"
AUDIT_KEYS = {"at", "actor", "source", "action", "schedule", "note", "changes"}


def cli(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``celery -A wproj gaffer <args>``, a real process, as a user types it."""
    return subprocess.run(
        [sys.executable, "-m", "celery", "-A", "wproj", "gaffer", *args],
        cwd=tmp_path,
        env=project_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=60,
    )


def audit_rows(page: Any) -> list[tuple[str, str, str, str, str]]:
    """The audit page's rows, newest first: (actor, source, action, schedule, note), each
    read from its own cell."""
    rows = []
    for row in page.locator("#audit tbody tr[data-audit]").all():
        note = row.locator(".note-text")
        rows.append(
            (
                row.locator(".actor").inner_text().strip(),
                row.locator(".source").inner_text().strip(),
                row.locator(".action").inner_text().strip(),
                row.locator("td.name a").inner_text().strip(),
                note.inner_text().strip() if note.count() else "",
            )
        )
    return rows


def test_the_audit_log_names_who_paused_each_schedule_and_beat_resumes_at_the_time_set(
    project: ScheduleStore,  # noqa: F811
    consoles: Any,  # noqa: F811
    browser: Any,  # noqa: F811
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    (tmp_path / "wproj.py").write_text(NAMED)
    monkeypatch.setenv("WPROJ_TOKENS", json.dumps({"alice": ALICE, "deploy-bot": BOT}))
    monkeypatch.delenv("WPROJ_READ_TOKENS", raising=False)
    project.add(A, "wproj.report", cron("30 1 * * *", "Europe/London"))
    project.add(B, "wproj.settle", every(600), kwargs={"invoice_id": 11})
    project.add(C, "wproj.report", every(900))
    project.add(D, "wproj.report", cron("0 18 * * 1-5", "Europe/Paris"))
    console = consoles("--port", "0")
    shots = Path(os.environ.get("GAFFER_SCREENSHOT_DIR", tmp_path))
    shots.mkdir(parents=True, exist_ok=True)
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))

    # A: Alice, in the browser, with a note and a time a few seconds ahead.
    page.goto(console.url + "login")
    page.fill("input[name=token]", ALICE)
    page.click("#login")
    page.wait_for_load_state()
    page.goto(console.url + f"schedules/{A}")
    assert page.locator("#state").inner_text().strip() == "ok"
    ends = (datetime.now(UTC) + timedelta(seconds=5)).replace(microsecond=0)
    page.fill("#pause-note", "month-end close")
    page.fill("#pause-until", ends.strftime("%Y-%m-%dT%H:%M:%SZ"))
    page.click("#pause")
    if page.locator("#confirm").count():
        page.click("#confirm")
    page.wait_for_load_state()
    assert page.locator("#state").inner_text().strip() == "paused"
    paused = project.get(A)
    assert not paused.policy.enabled
    assert (paused.paused_note, paused.paused_until) == ("month-end close", ends)

    # B: deploy-bot, through the API with its own token.
    bearer = {"Authorization": f"Bearer {BOT}"}
    done = console.post(f"api/schedules/{B}/pause", headers=bearer, json={"note": "deploy 4812"})
    assert done.status_code == 200, done.text
    assert not project.get(B).policy.enabled

    # C and D: the CLI, as the OS user and as a named actor.
    me = getpass.getuser()
    for name, extra in ((C, []), (D, ["--actor", "ops-oncall"])):
        done = cli(tmp_path, "pause", name, "--note", f"{name} on hold", *extra)
        assert done.returncode == 0, done.stderr
        assert not project.get(name).policy.enabled

    page.goto(console.url + "audit")
    pauses = [row for row in audit_rows(page) if row[2] == "pause"]
    assert pauses == [
        ("ops-oncall", "cli", "pause", D, f"{D} on hold"),
        (me, "cli", "pause", C, f"{C} on hold"),
        ("deploy-bot", "api", "pause", B, "deploy 4812"),
        ("alice", "console", "pause", A, "month-end close"),
    ]
    # The entries the store wrote when the schedules were added: the OS user, from code.
    assert [row[:3] for row in audit_rows(page) if row[2] == "add"] == [(me, "code", "add")] * 4

    alice = {"Authorization": f"Bearer {ALICE}"}
    listed = console.get("api/audit", params={"schedule": A}, headers=alice)
    assert listed.status_code == 200, listed.text
    [entry] = listed.json()[:1]
    assert set(entry) == AUDIT_KEYS
    assert [(e["action"], e["actor"], e["source"]) for e in listed.json()] == [
        ("pause", "alice", "console"),
        ("add", me, "code"),
    ]
    assert entry["note"] == "month-end close"
    assert entry["schedule"] == A
    assert entry["changes"]["enabled"] == [True, False]

    # A real Beat resumes A by itself once its pause ended; B, C and D stay paused.
    with celery_processes() as started:
        beat = CeleryProcess(
            tmp_path,
            "wproj",
            ["beat", "-S", "gaffer", "-l", "INFO", "-s", str(tmp_path / "beat-schedule")],
            "beat",
        )
        started.append(beat)
        beat.wait_for_log(f"resumed schedule {A}: its pause ended", timeout=60)
        # The state word sits in the page's title, outside the live sections: a reload.
        page.goto(console.url + f"schedules/{A}")
        deadline = time.monotonic() + 60
        while page.locator("#state").inner_text().strip() == "paused":
            assert time.monotonic() < deadline, beat.log()[-5000:]
            time.sleep(0.5)
            page.reload()
        assert page.locator("#state").inner_text().strip() == "ok"
        assert page.locator("#resume").is_disabled()
        assert project.get(A).policy.enabled
        assert not any(project.get(name).policy.enabled for name in (B, C, D))

        page.goto(console.url + "audit")
        newest = audit_rows(page)[0]
        assert newest == ("beat", "beat", "resume", A, f"paused until {ends.isoformat()} passed")
        assert page.evaluate("document.documentElement.scrollWidth <= innerWidth")
        page.screenshot(path=str(shots / "web-audit.png"), full_page=True)

        log = beat.log()
    assert "Traceback" not in log
    assert errors == []
    assert (shots / "web-audit.png").read_bytes()[:4] == b"\x89PNG"
    context.close()
