"""How the console looks and behaves in Debian's chromium (Playwright): no page wider than
a desktop or a phone screen, names that wrap only between words, dark mode, times shown
relative, live updates without a reload and their pause switch, keyboard and labels, and
text contrast (WCAG AA) in both themes.

``screenshot(page, name)`` saves ``docs/images/console/<name>.png`` when
``GAFFER_SCREENSHOTS=1``: the docs' pictures come from these tests' browser.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from typing import Any
from urllib.parse import quote

import pytest
from sqlalchemy import select

from celery_gaffer import ScheduleStore, cron, every
from celery_gaffer.store import database_for
from celery_gaffer.store.models import table_of
from celery_gaffer.store.runs import finish_runs, insert_runs
from celery_gaffer.store.schedules import update_schedule_facts

from ..processes import ROOT
from .test_web import TOKEN, browser, consoles, project, seed

pytestmark = pytest.mark.acceptance
__all__ = ["browser", "consoles", "project"]  # the fixtures, shared with test_web.py

UTC = timezone.utc
#: Every page, as a path: ``{schedule}`` is a schedule with a long name, ``{run}`` a run
#: with a long error. Pages added to the console go here (all tests below visit them).
PAGES: list[str] = [
    "/",
    "/schedules",
    "/schedules/{schedule}",
    "/runs",
    "/runs/{run}",
    "/alerts",
    "/audit",
    "/bulk?action=resume&name={schedule}",
    "/login",
]
WIDTHS = (1280, 390)
LONG_NAME = "nightly-reconciliation-of-european-ledger-accounts-for-q4-2026-with-late-fees"
DOTTED_NAME = "billing.export_quarterly_statements.to_the_archive_bucket"
LONG_TASK = "wproj.tasks.reconcile_european_ledger_accounts_with_retries_and_backoff"
LONG_ERROR = (
    "HTTPSConnectionPool(host='ledger.bank.example', port=443): Max retries exceeded with url: "
    "/v1/accounts/reconciliation/batches/2026-q4?include=entries,fees,adjustments&page_token="
    "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4gRG9lIn0"
    " (Caused by NewConnectionError('Failed to establish a new connection: [Errno 111]'))"
)
LONG_WORKER = "celery@worker-eu-west-1-reconciliation-pool-7f9c8d6b5-x2x9k.internal.example"
#: Characters a name may wrap after (or the space a sentence wraps at).
BREAKS_AFTER = set("-_./:@ ")


def screenshot(page: Any, name: str) -> None:
    """``page`` as ``docs/images/console/<name>.png``, when ``GAFFER_SCREENSHOTS=1``."""
    if os.environ.get("GAFFER_SCREENSHOTS") != "1":
        return
    folder = ROOT / "docs" / "images" / "console"
    folder.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(folder / f"{name}.png"), full_page=True)


def seed_long(store: ScheduleStore) -> int:
    """``seed``'s schedules, and schedules, runs and errors with long names and tokens;
    the id of a failed run with a long error."""
    seed(store)
    now = datetime.now(UTC)
    store.add(LONG_NAME, LONG_TASK, cron("15 3 * * 1-5", "America/Argentina/Buenos_Aires"))
    store.add(DOTTED_NAME, "wproj.report", every(86400), kwargs={"bucket": "s3://" + "b" * 90})
    database = database_for(store.app)
    nominal = (now - timedelta(minutes=30)).replace(second=0, microsecond=0)
    run = {
        "task_id": "task-long",
        "task_name": LONG_TASK,
        "schedule": LONG_NAME,
        "nominal_at": nominal,
        "key": f"{LONG_NAME}@{nominal:%Y-%m-%dT%H:%M:%SZ}",
        "attempt": 3,
        "state": "failed",
        "started_at": nominal,
        "finished_at": nominal + timedelta(seconds=95),
        "duration": 95.0,
        "fence": 12,
        "worker": LONG_WORKER,
        "updated_at": now,
        "error_type": "requests.exceptions.ConnectionError",
        "error_message": LONG_ERROR,
    }
    with database.begin() as conn:
        insert_runs(conn, database.models, [run])
        update_schedule_facts(conn, database.models, LONG_NAME, "failed", nominal)
    return run_id(store, "task-long")


def run_id(store: ScheduleStore, task_id: str) -> int:
    database = database_for(store.app)
    runs = table_of(database.models.JobRun)
    with database.read() as conn:
        found: int = conn.execute(select(runs.c.id).where(runs.c.task_id == task_id)).scalar_one()
    return found


def start_run(store: ScheduleStore, task_id: str, minutes_ago: int) -> int:
    """A ``running`` run of invoices-sync; its row id."""
    database = database_for(store.app)
    now = datetime.now(UTC)
    nominal = (now - timedelta(minutes=minutes_ago)).replace(second=0, microsecond=0)
    row = {
        "task_id": task_id,
        "task_name": "wproj.settle",
        "schedule": "invoices-sync",
        "nominal_at": nominal,
        "key": f"invoices-sync@{nominal:%Y-%m-%dT%H:%M:%SZ}",
        "attempt": 1,
        "state": "running",
        "started_at": now,
        "worker": "celery@web-test",
        "updated_at": now,
    }
    with database.begin() as conn:
        insert_runs(conn, database.models, [row])
    return run_id(store, task_id)


def finish_run(store: ScheduleStore, row_id: int) -> None:
    """End run ``row_id`` as failed, as the run recorder does."""
    database = database_for(store.app)
    end = {
        "state": "failed",
        "finished_at": datetime.now(UTC),
        "duration": 2.5,
        "error_type": "TimeoutError",
        "error_message": "the bank took too long",
    }
    with database.begin() as conn:
        finish_runs(conn, database.models, [(row_id, end)])


@pytest.fixture
def watched(browser: Any) -> Iterator[Any]:
    """``watched(**context options)``: a page whose script errors and console errors
    (a script or style the security policy refused says so there) are none at the end."""
    contexts = []
    problems: list[str] = []

    def open_page(**options: Any) -> Any:
        context = browser.new_context(**{"viewport": {"width": 1280, "height": 800}, **options})
        contexts.append(context)
        page = context.new_page()
        page.on("pageerror", lambda error: problems.append(f"page error: {error}"))
        page.on("console", lambda message: noted(message))
        return page

    def noted(message: Any) -> None:
        # A page answering 404 (one not merged yet, the favicon) is not the script's error.
        if message.type == "error" and not message.text.startswith("Failed to load resource"):
            problems.append(f"console: {message.text}")

    yield open_page
    for context in contexts:
        context.close()
    assert problems == []


def log_in(page: Any, url: str) -> None:
    page.goto(url + "login")
    page.fill("input[name=token]", TOKEN)
    page.click("#login")
    page.wait_for_load_state()


def visit(page: Any, url: str) -> Any:
    """Open ``url`` and wait for the console's script to have started."""
    response = page.goto(url)
    if response is not None and response.status == 200:
        page.wait_for_function("document.documentElement.hasAttribute('data-ready')")
    return response


LINE_BREAKS = """(element) => {
    // Each place a line ends inside element's text: [last char of the line, next char].
    const breaks = [];
    const walker = document.createTreeWalker(element, NodeFilter.SHOW_TEXT);
    let top = null, last = null;
    while (walker.nextNode()) {
        const node = walker.currentNode;
        for (let i = 0; i < node.length; i++) {
            const range = document.createRange();
            range.setStart(node, i);
            range.setEnd(node, i + 1);
            const rects = range.getClientRects();
            if (!rects.length) continue;
            if (top !== null && rects[0].top > top + 2) breaks.push([last, node.data[i]]);
            top = rects[0].top;
            last = node.data[i];
        }
    }
    return breaks;
}"""


def mid_word_breaks(page: Any, selector: str) -> list[str]:
    """Where the text of each ``selector`` element wraps other than after a separator."""
    found = []
    for element in page.locator(selector).element_handles():
        for before, after in element.evaluate(LINE_BREAKS):
            if before not in BREAKS_AFTER and after != " ":
                found.append(f"{selector}: {before!r}/{after!r} in {element.inner_text()!r}")
    return found


@pytest.mark.parametrize("width", WIDTHS)
def test_no_page_is_wider_than_the_screen_and_names_wrap_between_words(
    project: ScheduleStore,
    consoles: Any,
    watched: Any,
    monkeypatch: pytest.MonkeyPatch,
    width: int,
) -> None:
    failed_run = seed_long(project)
    monkeypatch.setenv("WPROJ_TOKEN", TOKEN)
    console = consoles("--port", "0")
    page = watched(viewport={"width": width, "height": 900})
    log_in(page, console.url)  # logged in: the detail page has its action forms too
    problems: list[str] = []
    shown = 0
    for path in PAGES:
        url = console.url + path.format(schedule=quote(LONG_NAME, safe=""), run=failed_run)[1:]
        response = visit(page, url)
        assert response is not None
        assert response.status == 200, (path, response.status)
        shown += 1
        wide = page.evaluate("[document.documentElement.scrollWidth, window.innerWidth]")
        if wide[0] > wide[1]:
            problems.append(f"{path} at {width}px: {wide[0]}px wide")
        slug = path.strip("/").split("/")[0] or "overview"
        screenshot(page, f"{slug}{'-detail' if '{' in path else ''}-{width}")
    assert shown == len(PAGES)
    # Without the script too (no box around the tables): they scroll by themselves.
    plain = watched(viewport={"width": width, "height": 900}, java_script_enabled=False)
    for path in ("/schedules", "/runs", "/schedules/{schedule}", "/alerts"):
        plain.goto(console.url + path.format(schedule=quote(LONG_NAME, safe=""))[1:])
        wide = plain.evaluate("[document.documentElement.scrollWidth, window.innerWidth]")
        if wide[0] > wide[1]:
            problems.append(f"{path} at {width}px without the script: {wide[0]}px wide")

    visit(page, console.url + "schedules")
    for name in (LONG_NAME, DOTTED_NAME):
        problems += mid_word_breaks(page, f'tr[data-schedule="{name}"] td.name a')
    visit(page, console.url + "runs")
    problems += mid_word_breaks(page, "#runs td.schedule a")
    assert problems == []


def test_names_are_never_cut_mid_word_even_in_a_narrow_column(
    project: ScheduleStore, consoles: Any, watched: Any
) -> None:
    """A long name with separators wraps after them at every width in between, where the
    schedules table is tightest."""
    seed_long(project)
    console = consoles("--port", "0")
    problems: list[str] = []
    for width in (1024, 900, 800, 721):
        page = watched(viewport={"width": width, "height": 800})
        visit(page, console.url + "schedules")
        problems += mid_word_breaks(page, f'tr[data-schedule="{LONG_NAME}"] td.name a')
        # It did wrap: the check above looked at real line breaks.
        lines = page.locator(f'tr[data-schedule="{LONG_NAME}"] td.name a').evaluate(LINE_BREAKS)
        assert lines, width
        assert page.evaluate("document.documentElement.scrollWidth <= innerWidth"), width
    assert problems == []


BACKGROUND = "getComputedStyle(document.body).backgroundColor"


def luminance(css: str) -> float:
    """The relative luminance (WCAG) of an ``rgb()``/``rgba()`` colour."""
    red, green, blue = (float(part) / 255 for part in re.findall(r"[\d.]+", css)[:3])

    def linear(channel: float) -> float:
        return channel / 12.92 if channel <= 0.04045 else ((channel + 0.055) / 1.055) ** 2.4

    return 0.2126 * linear(red) + 0.7152 * linear(green) + 0.0722 * linear(blue)


def contrast(first: str, second: str) -> float:
    """The WCAG contrast ratio of two colours, 1 to 21."""
    lighter, darker = sorted((luminance(first), luminance(second)), reverse=True)
    return (lighter + 0.05) / (darker + 0.05)


FIRST_PAINT_THEME = """
    // The theme as the body starts: what the first paint shows.
    new MutationObserver((changes, observer) => {
        if (document.body) {
            window.themeAtFirstPaint = document.documentElement.getAttribute("data-theme");
            window.bodyBackground = getComputedStyle(document.body).backgroundColor;
            observer.disconnect();
        }
    }).observe(document, {childList: true, subtree: true});
"""


def test_dark_mode_follows_the_system_and_the_switch(
    project: ScheduleStore, consoles: Any, watched: Any
) -> None:
    seed_long(project)
    console = consoles("--port", "0")
    page = watched(color_scheme="light")
    page.add_init_script(FIRST_PAINT_THEME)
    visit(page, console.url + "schedules")
    light = page.evaluate(BACKGROUND)
    assert luminance(light) > 0.8
    assert page.locator("#theme-switch").input_value() == "system"

    page.select_option("#theme-switch", "dark")
    assert page.evaluate("document.documentElement.dataset.theme") == "dark"
    dark = page.evaluate(BACKGROUND)
    assert luminance(dark) < 0.05
    assert contrast(page.evaluate("getComputedStyle(document.body).color"), dark) >= 7
    screenshot(page, "schedules-dark-1280")
    # Kept, and applied before the first paint: the page never flashes light.
    visit(page, console.url + "runs")
    assert page.evaluate("window.themeAtFirstPaint") == "dark"
    assert page.evaluate("window.bodyBackground") == dark
    assert page.locator("#theme-switch").input_value() == "dark"

    page.select_option("#theme-switch", "system")
    assert page.evaluate("document.documentElement.dataset.theme") is None
    assert page.evaluate(BACKGROUND) == light

    # The system's dark scheme, with no choice made: dark at once.
    system_dark = watched(color_scheme="dark")
    visit(system_dark, console.url + "schedules")
    assert system_dark.evaluate("document.documentElement.dataset.theme") is None
    assert system_dark.evaluate(BACKGROUND) == dark
    # ... and "light" overrides it.
    system_dark.select_option("#theme-switch", "light")
    assert system_dark.evaluate(BACKGROUND) == light


def row_state(page: Any, row_id: int) -> str:
    text: str = page.locator(f'tr[data-run="{row_id}"] td.state').inner_text()
    return text.strip()


def wait_for_state(page: Any, row_id: int, state: str, timeout: float = 15.0) -> None:
    page.wait_for_function(
        "([id, state]) => { const cell = document.querySelector(`tr[data-run='${id}'] td.state`);"
        " return cell !== null && cell.innerText.trim() === state; }",
        arg=[row_id, state],
        timeout=timeout * 1000,
    )


def stays(page: Any, row_id: int, state: str, seconds: float = 11.0) -> bool:
    """Whether run ``row_id`` still shows ``state`` after two polls' time."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if row_state(page, row_id) != state:
            return False
        page.wait_for_timeout(500)
    return True


def test_a_run_ending_changes_its_row_without_a_reload_unless_paused_or_typing(
    project: ScheduleStore, consoles: Any, watched: Any
) -> None:
    seed(project)
    first = start_run(project, "task-live-1", 3)
    second = start_run(project, "task-live-2", 2)
    third = start_run(project, "task-live-3", 1)
    console = consoles("--port", "0")
    page = watched()
    visit(page, console.url + "runs")
    page.evaluate("window.sameDocument = true")
    for row_id in (first, second, third):
        assert row_state(page, row_id) == "running"

    finish_run(project, first)
    wait_for_state(page, first, "failed")
    assert (
        "TimeoutError: the bank took too long"
        in page.locator(f'tr[data-run="{first}"]').inner_text()
    )
    assert page.evaluate("window.sameDocument") is True
    assert page.evaluate("performance.getEntriesByType('navigation').length") == 1
    # The new row is a card on a phone too: its cells are labelled by their column.
    assert page.locator(f'tr[data-run="{first}"] td.state').get_attribute("data-label") == "State"

    # Paused: nothing changes, and the choice is kept.
    page.click("#live-switch")
    assert not page.locator("#live-switch").is_checked()
    assert page.locator("#live-status").inner_text() == "(paused)"
    finish_run(project, second)
    assert stays(page, second, "running")
    visit(page, console.url + "runs")
    assert not page.locator("#live-switch").is_checked()
    page.evaluate("window.sameDocument = true")
    assert row_state(page, second) == "failed"  # as loaded
    page.click("#live-switch")

    # Typing in the filter form: nothing changes under the reader's hands...
    page.click("#run-schedule")
    page.keyboard.type("invoices")
    finish_run(project, third)
    assert stays(page, third, "running")
    # ... until they leave it.
    page.click("h1")
    wait_for_state(page, third, "failed")
    assert page.evaluate("window.sameDocument") is True


def test_times_are_relative_with_the_exact_time_zone_and_utc_on_hover(
    project: ScheduleStore, consoles: Any, watched: Any
) -> None:
    seed_long(project)
    console = consoles("--port", "0")
    page = watched(timezone_id="Pacific/Auckland")
    page.clock.install()
    visit(page, console.url + "runs")
    stamp = page.locator("#as-of time")
    assert stamp.inner_text() in {"now", "5 s ago", "6 s ago"}
    datetime_value = stamp.get_attribute("datetime")
    assert re.fullmatch(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z", datetime_value)
    title = stamp.get_attribute("title")
    assert title == datetime_value.replace("T", " ").replace("Z", " UTC")
    # Words relative to now, kept up to date as time passes (with Live paused, the
    # page's data stays as loaded).
    page.click("#live-switch")
    page.clock.fast_forward("03:00")
    assert stamp.inner_text() == "3 min ago"
    page.clock.fast_forward("02:00:00")
    assert stamp.inner_text() == "2 h 3 min ago"
    assert stamp.get_attribute("title") == title
    for time_element in page.locator("time").element_handles():
        text = time_element.inner_text()
        assert re.fullmatch(r"in .+|.+ ago|now", text), text
        exact = time_element.get_attribute("title")
        assert re.fullmatch(r"\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2} .*UTC", exact), exact


KEYBOARD_FOCUS = """() => {
    const element = document.activeElement;
    const style = getComputedStyle(element);
    const box = element.getBoundingClientRect();
    return {id: element.id, outline: style.outlineStyle, width: parseFloat(style.outlineWidth),
            top: box.top, height: box.height};
}"""

UNLABELLED = """() => Array.from(document.querySelectorAll("input, select, textarea"))
    .filter((field) => field.type !== "hidden")
    .filter((field) => !(field.labels && field.labels.length) && !field.getAttribute("aria-label")
        && !field.getAttribute("aria-labelledby"))
    .map((field) => field.outerHTML)"""

LOW_CONTRAST = """() => {
    // Every piece of visible text whose colour is below WCAG AA on what is behind it.
    const parse = (css) => (css.match(/[\\d.]+/g) || []).map(Number);
    const over = (top, bottom) => {
        const alpha = top.length > 3 ? top[3] : 1;
        return [0, 1, 2].map((i) => top[i] * alpha + bottom[i] * (1 - alpha));
    };
    const background = (element) => {
        const layers = [];
        for (let node = element; node; node = node.parentElement) {
            const colour = parse(getComputedStyle(node).backgroundColor);
            if (colour.length && (colour.length < 4 || colour[3] > 0)) layers.push(colour);
            if (colour.length && (colour.length < 4 || colour[3] === 1)) break;
        }
        let result = [255, 255, 255];
        for (const layer of layers.reverse()) result = over(layer, result);
        return result;
    };
    const luminance = (rgb) => {
        const [r, g, b] = rgb.map((c) => {
            c /= 255;
            return c <= 0.04045 ? c / 12.92 : Math.pow((c + 0.055) / 1.055, 2.4);
        });
        return 0.2126 * r + 0.7152 * g + 0.0722 * b;
    };
    const faded = (element) => {
        for (let node = element; node; node = node.parentElement) {
            if (parseFloat(getComputedStyle(node).opacity) < 1) return true;
        }
        return false;
    };
    const low = [];
    for (const element of document.querySelectorAll("body *")) {
        const text = Array.from(element.childNodes)
            .filter((node) => node.nodeType === Node.TEXT_NODE)
            .map((node) => node.data).join("").trim();
        if (!text || !element.getClientRects().length) continue;
        const style = getComputedStyle(element);
        if (style.visibility !== "visible" || element.disabled || faded(element)) continue;
        const behind = background(element);
        const ink = over(parse(style.color), behind);
        const [light, dark] = [luminance(ink), luminance(behind)].sort((a, b) => b - a);
        const ratio = (light + 0.05) / (dark + 0.05);
        const size = parseFloat(style.fontSize);
        const large = size >= 24 || (size >= 18.66 && parseInt(style.fontWeight) >= 700);
        if (ratio < (large ? 3 : 4.5)) {
            low.push(`${ratio.toFixed(2)} ${element.tagName} "${text.slice(0, 40)}"`);
        }
    }
    return low;
}"""


def test_keyboard_labels_and_contrast_in_both_themes(
    project: ScheduleStore, consoles: Any, watched: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    failed_run = seed_long(project)
    monkeypatch.setenv("WPROJ_TOKEN", TOKEN)
    console = consoles("--port", "0")
    page = watched()
    visit(page, console.url + "runs")

    # Tab: the skip link first, shown with a focus ring; it leads to the page's content.
    page.keyboard.press("Tab")
    focus = page.evaluate(KEYBOARD_FOCUS)
    assert focus["id"] == "skip"
    assert focus["outline"] != "none"
    assert focus["width"] >= 2
    assert focus["top"] >= 0  # on screen once focused
    assert focus["height"] > 0
    page.keyboard.press("Enter")
    assert page.evaluate("document.activeElement.id") == "main"
    # The theme switch is reached by Tab, and changed from the keyboard.
    page.evaluate("document.activeElement.blur()")
    visit(page, console.url + "runs")
    reached = []
    for _ in range(15):
        page.keyboard.press("Tab")
        reached.append(page.evaluate(KEYBOARD_FOCUS))
        if reached[-1]["id"] == "theme-switch":
            break
    assert [step["id"] for step in reached][:1] == ["skip"]
    assert reached[-1]["id"] == "theme-switch", reached
    assert reached[-1]["outline"] != "none"
    assert "live-switch" in [step["id"] for step in reached]

    log_in(page, console.url)
    problems: list[str] = []
    for path in PAGES:
        url = console.url + path.format(schedule=quote(LONG_NAME, safe=""), run=failed_run)[1:]
        response = visit(page, url)
        assert response is not None
        assert response.status == 200, (path, response.status)
        problems += [f"{path}: unlabelled {field}" for field in page.evaluate(UNLABELLED)]
        for scheme in ("light", "dark"):
            page.emulate_media(color_scheme=scheme)
            problems += [f"{path} ({scheme}): {low}" for low in page.evaluate(LOW_CONTRAST)]
        page.emulate_media(color_scheme="light")
    assert problems == []


def test_a_flash_shows_times_on_the_schedules_clock_not_as_iso(
    project: ScheduleStore, consoles: Any, watched: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    project.add("nightly-report", "wproj.report", cron("30 1 * * *", "Europe/London"))
    project.pause("nightly-report")
    monkeypatch.setenv("WPROJ_TOKEN", TOKEN)
    console = consoles("--port", "0")
    page = watched()
    log_in(page, console.url)
    visit(page, console.url + "schedules/nightly-report")
    page.click("#resume")
    page.click("#confirm")
    page.wait_for_load_state()
    flash = page.locator("#flash").inner_text()
    assert flash.startswith("resumed nightly-report: next fire ")
    # London's clock, UTC in brackets (GMT in winter, BST in summer).
    assert re.search(r"\d{4}-\d{2}-\d{2} 01:30 (GMT \(01:30Z\)|BST \(00:30Z\))$", flash), flash
    assert not re.search(r"\d{2}T\d{2}", flash)
