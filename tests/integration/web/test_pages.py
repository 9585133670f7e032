"""The console's pages over HTTP: schedules, detail, runs and alerts."""

from __future__ import annotations

import html
import re
from datetime import datetime, timedelta, timezone

from celery import Celery

from celery_gaffer import ScheduleStore, cron, every

from ...support import FrozenClock
from .conftest import Client, insert_fire, insert_run, tick_beat

UTC = timezone.utc


def rows_of(page: str) -> list[str]:
    """The schedule names of a schedules (or alerts) table, in order (as escaped HTML)."""
    return re.findall(r'<tr data-schedule="([^"]*)">', page)


def cell(page: str, name: str, column: str) -> str:
    """The text of one cell of the schedules table."""
    row = page.split(f'<tr data-schedule="{name}">', 1)[1].split("</tr>", 1)[0]
    found = re.search(rf'<td class="{column}">(.*?)</td>', row, re.S)
    assert found is not None, f"no {column} cell for {name}"
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", found.group(1))).split())


def test_the_root_is_the_overview(client: Client) -> None:
    response = client.get("/")
    assert response.status_code == 200
    assert "<h1>Overview</h1>" in response.text


def test_the_schedules_page_shows_each_schedule_in_its_zone(
    client: Client, store: ScheduleStore
) -> None:
    store.add("nightly", "t.noop", cron("30 1 * * *", "Europe/London"))
    store.add("often", "t.noop", every(300))
    store.pause("often")
    page = client.get("/schedules").text
    assert rows_of(page) == ["nightly", "often"]
    assert cell(page, "nightly", "task") == "t.noop"
    assert cell(page, "nightly", "zone") == "Europe/London"
    assert "daily at 01:30" in cell(page, "nightly", "schedule")
    assert "cron '30 1 * * *' Europe/London" in cell(page, "nightly", "schedule")
    # 2026-06-02 01:30 in London (BST) is 00:30Z.
    assert cell(page, "nightly", "next-fire") == "2026-06-02 01:30 BST (00:30Z)"
    assert cell(page, "nightly", "state") == "ok"
    assert cell(page, "often", "state") == "paused"
    assert cell(page, "often", "schedule").startswith("every 5 minutes")
    assert cell(page, "often", "source") == "db"
    assert cell(page, "nightly", "last-run") == "none"


def test_pages_of_schedules_follow_the_name_index(client: Client, store: ScheduleStore) -> None:
    store.add_many(
        {"name": f"job-{i:03d}", "task": "t.noop", "schedule": every(60)} for i in range(120)
    )
    first = client.get("/schedules").text
    names = rows_of(first)
    assert names == [f"job-{i:03d}" for i in range(50)]
    next_link = re.search(r'<a href="([^"]+)" id="next-page"', first)
    assert next_link is not None
    assert next_link.group(1) == "/schedules?after=job-049"
    second = client.get("/schedules", params={"after": "job-049"}).text
    assert rows_of(second)[0] == "job-050"
    third = client.get("/schedules", params={"after": "job-099"}).text
    assert rows_of(third) == [f"job-{i:03d}" for i in range(100, 120)]
    assert 'id="next-page"' not in third


def test_the_schedules_page_filters_by_state_and_searches_names(
    client: Client, store: ScheduleStore, celery_app: Celery
) -> None:
    for name in ("alpha-report", "beta-report", "gamma-sync"):
        store.add(name, "t.noop", every(60))
    store.pause("beta-report")
    ScheduleStore(celery_app, source="config").sync_config(
        {"broken": {"task": "t.unknown", "schedule": every(60)}}
    )
    assert rows_of(client.get("/schedules?state=paused").text) == ["beta-report"]
    errors = client.get("/schedules?state=error").text
    assert rows_of(errors) == ["broken"]
    assert "t.unknown" in cell(errors, "broken", "reason")
    assert rows_of(client.get("/schedules?state=ok").text) == ["alpha-report", "gamma-sync"]
    assert rows_of(client.get("/schedules?q=REPORT").text) == ["alpha-report", "beta-report"]
    assert rows_of(client.get("/schedules?q=report&state=ok").text) == ["alpha-report"]
    # A LIKE wildcard in the search is a plain character.
    assert rows_of(client.get("/schedules?q=%25").text) == []
    assert client.get("/schedules?state=sleepy").status_code == 400


def test_the_detail_page_shows_next_fires_with_the_dst_note(
    celery_app: Celery, clock: FrozenClock, client: Client, store: ScheduleStore
) -> None:
    clock.now = datetime(2027, 3, 26, 12, 0, tzinfo=UTC)
    store.add("london", "t.noop", cron("30 1 * * *", "Europe/London"))
    page = client.get("/schedules/london").text
    assert '<span class="state ok" id="state">ok</span>' in page
    fires = re.search(r'<ol class="fires" id="next-fires">(.*?)</ol>', page, re.S)
    assert fires is not None
    listed = re.findall(r"<li[^>]*>(.*?)(?: <span.*?)?</li>", fires.group(1))
    # 01:30 does not exist on 2027-03-28 in London: it fires at the gap's end, 02:00 BST.
    assert listed[:3] == [
        "2027-03-27 01:30 GMT (01:30Z)",
        "2027-03-28 02:00 BST (01:00Z)",
        "2027-03-29 01:30 BST (00:30Z)",
    ]
    notes = re.search(r'<ul class="dst" id="dst-notes">(.*?)</ul>', page, re.S)
    assert notes is not None
    assert "01:30 does not exist: fires once, at the gap&#39;s end" in notes.group(1)


def test_the_detail_page_shows_ledger_fires_and_runs_with_key_fence_and_reason(
    celery_app: Celery, clock: FrozenClock, client: Client, store: ScheduleStore
) -> None:
    store.add("billing", "t.noop", every(3600))
    first = datetime(2026, 6, 1, 10, 0, tzinfo=UTC)
    second = first + timedelta(hours=1)
    insert_fire(celery_app, "billing", first, publish_count=2)
    insert_fire(celery_app, "billing", second, state="pending", sent_at=None, publish_count=0)
    insert_run(
        celery_app,
        "billing",
        first,
        state="fence_lost",
        fence=7,
        error_type="FenceLost",
        error_message="lease taken over by fence 8",
    )
    insert_run(
        celery_app,
        "billing",
        second,
        state="running",
        fence=8,
        items=1200,
        cursor="order-4411",
        finished_at=None,
        duration=None,
        task_id="task-2",
    )
    page = client.get("/schedules/billing").text
    fires = page.split('id="fires"', 1)[1].split("</table>", 1)[0]
    assert re.findall(r'<td class="publish-count">(\d+)</td>', fires) == ["0", "2"]
    assert ">pending<" in fires
    assert ">sent<" in fires
    runs = page.split('id="runs"', 1)[1].split("</table>", 1)[0]
    assert "billing@2026-06-01T10:00:00Z" in runs
    assert '<td class="fence">7</td>' in runs
    assert "FenceLost: lease taken over by fence 8" in runs
    # A running batch shows its progress: items done and the cursor.
    assert '1200 <span class="muted">at order-4411</span>' in runs


def test_the_runs_page_filters_by_state_and_schedule(
    celery_app: Celery, client: Client, store: ScheduleStore
) -> None:
    base = datetime(2026, 6, 1, 8, 0, tzinfo=UTC)
    insert_run(celery_app, "a", base, state="failed", error_type="ValueError", error_message="bad")
    insert_run(celery_app, "a", base + timedelta(hours=1), task_id="t-a2")
    insert_run(
        celery_app,
        "b",
        base,
        state="duplicate",
        task_id="t-b1",
        error_message="key already completed",
    )
    everything = client.get("/runs").text
    assert len(re.findall(r"<tr data-run=", everything)) == 3
    failed = client.get("/runs?state=failed").text
    assert re.findall(r'<td class="state"><span class="state (\w+)"', failed) == ["failed"]
    assert "ValueError: bad" in failed
    only_b = client.get("/runs?schedule=b").text
    assert re.findall(r'<td class="state"><span class="state (\w+)"', only_b) == ["duplicate"]
    assert "key already completed" in only_b
    assert client.get("/runs?state=nope").status_code == 400


def test_the_alerts_page_shows_a_late_schedule_and_why(
    celery_app: Celery, clock: FrozenClock, client: Client, store: ScheduleStore
) -> None:
    store.add("late-one", "t.noop", every(60))
    store.add("quiet", "t.noop", every(60))
    store.pause("quiet")
    assert rows_of(client.get("/alerts").text) == []
    clock.advance(600)  # Beat ticks but its fires have not succeeded past the grace
    tick_beat(celery_app, clock.now)
    page = client.get("/alerts").text
    assert rows_of(page) == ["late-one"]
    assert cell(page, "late-one", "state") == "late"
    assert cell(page, "late-one", "reason") == "the fire of 2026-06-01 12:09:00Z has not succeeded"
    listing = client.get("/schedules").text
    assert cell(listing, "late-one", "state") == "late"
    assert rows_of(client.get("/schedules?state=late").text) == ["late-one"]


def test_the_alerts_page_lists_at_most_50_and_says_more_follow(
    clock: FrozenClock, client: Client, store: ScheduleStore
) -> None:
    store.add_many(
        {"name": f"s{i:03d}", "task": "t.noop", "schedule": every(60)} for i in range(51)
    )
    clock.advance(600)  # Beat is down: every schedule is late
    page = client.get("/alerts").text
    assert len(rows_of(page)) == 50
    assert 'id="more-alerts"' in page
    api = client.get("/api/alerts")
    assert len(api.json()) == 50
    assert api.headers["x-more-alerts"] == "true"
    store.pause("s000")
    assert "x-more-alerts" not in client.get("/api/alerts").headers
    assert 'id="more-alerts"' not in client.get("/alerts").text
