"""The overview's Beat banner and a bulk pause with its preview, in Debian's chromium
driven by Playwright, against a real ``celery -A wproj gaffer web`` on PostgreSQL."""

from __future__ import annotations

import os
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from celery_gaffer import ScheduleStore, cron, every
from celery_gaffer.store import database_for
from celery_gaffer.store.audit import Actor, record
from celery_gaffer.store.beats import heartbeat
from celery_gaffer.web.overview import BEAT_QUIET

from .test_web import TOKEN, browser, consoles, project  # noqa: F401 - fixtures

pytestmark = pytest.mark.acceptance

UTC = timezone.utc


def tick(store: ScheduleStore, at: datetime) -> None:
    """The Beats' registry row of a Beat on ``beat-host`` that last ticked ``at``."""
    database = database_for(store.app)
    with database.begin() as conn:
        heartbeat(
            conn,
            database.models,
            name="beat-host:4242",
            host="beat-host",
            pid=4242,
            started_at=at - timedelta(hours=1),
            now=at,
        )


def test_in_a_browser_the_banner_shows_while_no_beat_ticks_and_goes_when_one_does(
    project: ScheduleStore,  # noqa: F811
    consoles: Any,  # noqa: F811
    browser: Any,  # noqa: F811
    tmp_path: Path,
) -> None:
    project.add("nightly-report", "wproj.report", cron("30 1 * * *", "Europe/Berlin"))
    tick(project, datetime.now(UTC) - timedelta(seconds=BEAT_QUIET * 10))
    console = consoles("--port", "0")
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.goto(console.url)
    banner = page.get_by_role("alert")
    assert banner.is_visible()
    assert f"No Beat has ticked in the last {BEAT_QUIET:.0f} seconds" in banner.inner_text()
    assert page.locator('tr[data-beat="beat-host:4242"]').is_visible()
    assert "Europe/Berlin" in page.locator("#clock-change").inner_text()
    shots = Path(os.environ.get("GAFFER_SCREENSHOT_DIR", tmp_path))
    shots.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(shots / "web-overview.png"), full_page=True)

    tick(project, datetime.now(UTC))
    # Without the live script the page is read again; with it, the banner goes by itself.
    if page.locator("script[src]").count() == 0:
        page.reload()
    page.get_by_role("alert").wait_for(state="detached", timeout=15_000)
    assert "No Beat" not in page.locator("main").inner_text()
    assert page.evaluate("document.documentElement.scrollWidth <= innerWidth")
    assert errors == []
    context.close()


def test_in_a_browser_a_bulk_pause_is_previewed_then_applied(
    project: ScheduleStore,  # noqa: F811
    consoles: Any,  # noqa: F811
    browser: Any,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    for name in ("billing-eu", "billing-us", "reports"):
        project.add(name, "wproj.report", every(3600))
    monkeypatch.setenv("WPROJ_TOKEN", TOKEN)
    console = consoles("--port", "0")
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    page = context.new_page()
    page.goto(console.url + "login")
    page.fill("input[name=token]", TOKEN)
    page.click("#login")
    page.wait_for_load_state()

    page.goto(console.url + "bulk?action=pause&name=billing-eu&name=billing-us&name=gone")
    assert page.locator("h1").inner_text() == "Bulk pause: 3 schedules"
    preview = page.locator("#bulk-preview")
    row = preview.locator('tr[data-schedule="billing-eu"]')
    assert row.locator("td.what").inner_text() == "no more fires until it is resumed"
    gone = preview.locator('tr[data-schedule="gone"]').inner_text()
    assert "no schedule named 'gone'" in gone
    assert project.get("billing-eu").enabled  # the preview changed nothing
    shots = Path(os.environ.get("GAFFER_SCREENSHOT_DIR", tmp_path))
    shots.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(shots / "web-bulk.png"), full_page=True)

    page.fill("#bulk-note", "billing freeze")
    page.click("#bulk-apply")
    page.wait_for_load_state()
    assert page.url.rstrip("/").endswith("/schedules")
    assert page.locator("#flash").inner_text() == ("paused 2 schedules; 1 refused or unknown: gone")
    assert not project.get("billing-eu").enabled
    assert not project.get("billing-us").enabled
    assert project.get("reports").enabled
    context.close()


def test_in_a_browser_the_overview_audit_and_bulk_pages_fit_a_laptop_and_a_phone(
    project: ScheduleStore,  # noqa: F811
    consoles: Any,  # noqa: F811
    browser: Any,  # noqa: F811
) -> None:
    project.add("nightly-report-for-the-accounting-team", "wproj.report", every(3600))
    tick(project, datetime.now(UTC))
    database = database_for(project.app)
    with database.begin() as conn:
        record(
            conn,
            database.models,
            Actor("deploy-bot", "api"),
            "pause",
            "nightly-report-for-the-accounting-team",
            datetime.now(UTC),
            note="a long note about why this schedule was paused during the quarter's close",
            changes={"enabled": [True, False], "paused_note": [None, "quarter close"]},
        )
    console = consoles("--port", "0")
    paths = ["", "audit", "bulk?action=pause&name=nightly-report-for-the-accounting-team"]
    widths = {}
    for width, height in ((1280, 800), (390, 844)):
        context = browser.new_context(viewport={"width": width, "height": height})
        page = context.new_page()
        for path in paths:
            page.goto(console.url + path)
            widths[(width, path)] = page.evaluate(
                "document.documentElement.scrollWidth - innerWidth"
            )
        context.close()
    assert widths == dict.fromkeys(widths, 0)
