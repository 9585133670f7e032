"""Bulk pause, resume and trigger: ``POST /api/schedules/bulk`` and the ``/bulk`` page."""

from __future__ import annotations

import re
from datetime import datetime, timezone
from typing import Any
from urllib.parse import unquote

from celery import Celery
from sqlalchemy import func, select

from celery_gaffer import ScheduleStore, cron, every
from celery_gaffer.store import database_for
from celery_gaffer.store.models import table_of
from celery_gaffer.web.bulk import FILTER_CAP, MAX_NAMES

from ...support import FrozenClock
from .conftest import Client, bearer, log_in

UTC = timezone.utc


def bulk(client: Client, **body: Any) -> Any:
    response = client.post("/api/schedules/bulk", headers=bearer(), json=body)
    assert response.status_code == 200, response.text
    return response.json()


def fires_in_ledger(app: Celery) -> int:
    database = database_for(app)
    with database.read() as conn:
        return int(
            conn.execute(
                select(func.count()).select_from(table_of(database.models.Fire))
            ).scalar_one()
        )


def noop(*args: Any, **kwargs: Any) -> None:
    return None


def as_form(pairs: list[tuple[str, str]]) -> dict[str, list[str]]:
    form: dict[str, list[str]] = {}
    for key, value in pairs:
        form.setdefault(key, []).append(value)
    return form


def three(store: ScheduleStore) -> None:
    """Three schedules: two of ``t.bill`` (one in Berlin), one of ``t.report``."""
    for task in ("t.bill", "t.report"):
        store.app.task(name=task, shared=False)(noop)
    store.add("a-billing", "t.bill", every(60))
    store.add("b-billing", "t.bill", cron("0 2 * * *", "Europe/Berlin"))
    store.add("c-report", "t.report", every(60))


def test_a_dry_run_pause_writes_nothing_and_says_what_it_would_do(
    client: Client, store: ScheduleStore
) -> None:
    three(store)
    store.pause("c-report")
    body = bulk(client, action="pause", names=["a-billing", "c-report"], dry_run=True)
    assert body["dry_run"] is True
    assert body["results"] == [
        {
            "name": "a-billing",
            "would": "pause",
            "message": "no more fires until it is resumed",
            "fires": [],
        },
        {
            "name": "c-report",
            "would": "pause",
            "message": "already paused: nothing changes",
            "fires": [],
        },
    ]
    assert store.get("a-billing").enabled is True


def test_bulk_pause_pauses_each_named_schedule_and_reports_unknown_names_on_their_own(
    client: Client, store: ScheduleStore
) -> None:
    three(store)
    body = bulk(client, action="pause", names=["a-billing", "nobody", "b-billing"], note="freeze")
    assert body["dry_run"] is False
    assert [line.get("done") for line in body["results"]] == ["pause", None, "pause"]
    unknown = body["results"][1]
    assert unknown["status"] == 404
    assert unknown["error"] == "name: no schedule named 'nobody'"
    assert store.get("a-billing").enabled is False
    assert store.get("b-billing").enabled is False
    assert store.get("c-report").enabled is True


def test_bulk_resume_does_what_its_preview_said(
    client: Client, store: ScheduleStore, clock: FrozenClock
) -> None:
    three(store)
    store.pause("a-billing")
    store.pause("b-billing")
    clock.advance(600)
    names = ["a-billing", "b-billing"]
    preview = bulk(client, action="resume", names=names, dry_run=True)["results"]
    assert store.get("a-billing").enabled is False
    assert preview[0]["skipped"] == 10
    assert preview[0]["fires"][0] == "2026-06-01T12:11:00Z"
    assert preview[1]["fires"][0] == "2026-06-02T00:00:00Z"  # 02:00 in Berlin
    done = bulk(client, action="resume", names=names)["results"]
    for before, after in zip(preview, done, strict=True):
        assert after["done"] == "resume"
        assert after["fires"] == before["fires"][:1]
    assert store.get("a-billing").next_fire_at == datetime(2026, 6, 1, 12, 11, tzinfo=UTC)


def test_bulk_trigger_previews_one_fire_now_and_sends_one_each(
    celery_app: Celery, client: Client, store: ScheduleStore
) -> None:
    three(store)
    preview = bulk(client, action="trigger", names=["a-billing", "c-report"], dry_run=True)
    assert [line["fires"] for line in preview["results"]] == [["2026-06-01T12:00:00Z"]] * 2
    assert fires_in_ledger(celery_app) == 0
    done = bulk(client, action="trigger", names=["a-billing", "c-report"])["results"]
    assert all(line["done"] == "trigger" and line["key"] for line in done)
    assert fires_in_ledger(celery_app) == 2


def test_a_filter_selects_everything_it_matches(client: Client, store: ScheduleStore) -> None:
    three(store)
    preview = bulk(client, action="pause", filter={"task": "t.bill"}, dry_run=True)
    assert [line["name"] for line in preview["results"]] == ["a-billing", "b-billing"]
    assert (preview["matched"], preview["more"], preview["limit"]) == (2, False, 10_000)
    assert store.get("a-billing").enabled is True
    by_zone = bulk(client, action="pause", filter={"zone": "Europe/Berlin"}, dry_run=True)
    assert [line["name"] for line in by_zone["results"]] == ["b-billing"]
    by_name = bulk(client, action="pause", filter={"q": "report", "source": "db"}, dry_run=True)
    assert [line["name"] for line in by_name["results"]] == ["c-report"]
    bulk(client, action="pause", filter={"task": "t.bill"})
    assert [s.enabled for s in store.list()] == [False, False, True]
    resumed = bulk(client, action="resume", filter={"state": "paused"})
    assert [line["name"] for line in resumed["results"]] == ["a-billing", "b-billing"]
    assert all(s.enabled for s in store.list())


def test_a_bad_bulk_action_is_a_400_naming_the_field(client: Client, store: ScheduleStore) -> None:
    three(store)
    cases = [
        ({"action": "remove", "names": ["a-billing"]}, "action"),
        ({"action": "pause", "names": []}, "names"),
        ({"action": "pause", "names": [f"n{i}" for i in range(MAX_NAMES + 1)]}, "names"),
        ({"action": "pause"}, "names"),
        ({"action": "pause", "names": ["a-billing"], "filter": {"task": "t.bill"}}, "names"),
        ({"action": "pause", "names": "a-billing"}, "names"),
        ({"action": "pause", "filter": {"colour": "red"}}, "filter"),
        ({"action": "pause", "filter": {"state": "sleepy"}}, "filter"),
        ({"action": "pause", "names": ["a-billing"], "dry_run": "yes"}, "dry_run"),
    ]
    for body, field in cases:
        response = client.post("/api/schedules/bulk", headers=bearer(), json=body)
        assert response.status_code == 400, body
        assert response.json()["error"].startswith(f"{field}:"), response.json()
    assert store.get("a-billing").enabled is True


def test_bulk_needs_the_bearer_token_and_a_console_with_one(
    client: Client, read_only: Client, store: ScheduleStore
) -> None:
    three(store)
    body = {"action": "pause", "names": ["a-billing"]}
    assert client.post("/api/schedules/bulk", json=body).status_code == 401
    assert client.post("/api/schedules/bulk", headers=bearer("wrong"), json=body).status_code == 401
    assert read_only.post("/api/schedules/bulk", headers=bearer(), json=body).status_code == 403
    assert store.get("a-billing").enabled is True


def test_the_bulk_page_previews_then_applies_with_csrf_and_a_flash(
    client: Client, store: ScheduleStore
) -> None:
    three(store)
    csrf = log_in(client)
    page = client.get("/bulk?action=pause&name=a-billing&name=c-report&name=ghost")
    assert page.status_code == 200
    assert "<h1>Bulk pause: 3 schedules</h1>" in page.text
    assert "no more fires until it is resumed" in page.text
    assert "name: no schedule named &#39;ghost&#39;" in page.text
    assert store.get("a-billing").enabled is True  # GET changes nothing
    hidden = re.findall(r'<input type="hidden" name="(\w+)" value="([^"]*)">', page.text)
    form = [(key, value) for key, value in hidden if key != "csrf"]
    assert form == [
        ("action", "pause"),
        ("name", "a-billing"),
        ("name", "c-report"),
        ("name", "ghost"),
    ]
    refused = client.post("/bulk", data=as_form([*form, ("csrf", "0" * 64)]))
    assert refused.status_code == 403
    assert store.get("a-billing").enabled is True
    done = client.post("/bulk", data=as_form([*form, ("csrf", csrf), ("note", "maintenance")]))
    assert done.status_code == 303
    assert done.headers["location"] == "/schedules"
    flash = unquote(client.http.cookies["gaffer_flash"])
    assert flash == "paused 2 schedules; 1 refused or unknown: ghost"
    assert store.get("a-billing").enabled is False
    assert store.get("c-report").enabled is False
    assert store.get("b-billing").enabled is True


def test_the_bulk_page_takes_a_filter_and_carries_it_to_apply(
    client: Client, store: ScheduleStore
) -> None:
    three(store)
    csrf = log_in(client)
    page = client.get("/bulk?action=pause&all=1&task=t.bill&state=&zone=")
    assert "<h1>Bulk pause: 2 schedules</h1>" in page.text
    hidden = re.findall(r'<input type="hidden" name="(\w+)" value="([^"]*)">', page.text)
    form = [(key, value) for key, value in hidden if key != "csrf"]
    assert form == [("action", "pause"), ("all", "1"), ("task", "t.bill"), ("expected", "2")]
    assert client.post("/bulk", data=as_form([*form, ("csrf", csrf)])).status_code == 303
    assert [s.enabled for s in store.list()] == [False, False, True]


def test_the_bulk_page_asks_to_log_in_before_it_offers_apply(
    client: Client, store: ScheduleStore
) -> None:
    three(store)
    page = client.get("/bulk?action=resume&name=a-billing").text
    assert 'id="bulk-apply"' not in page
    assert '<a href="/login">Log in</a> to apply this.' in page


def test_a_filter_past_the_cap_is_previewed_in_part_and_refused_when_applied(
    client: Client, store: ScheduleStore
) -> None:
    store.add_many(
        {"name": f"t{i:05d}", "task": "t.noop", "schedule": every(3600)}
        for i in range(FILTER_CAP + 1)
    )
    preview = bulk(client, action="pause", filter={"q": "t"}, dry_run=True)
    assert (preview["matched"], preview["more"]) == (FILTER_CAP, True)
    assert len(preview["results"]) == MAX_NAMES
    assert preview["results"][0]["name"] == "t00000"
    refused = client.post(
        "/api/schedules/bulk", headers=bearer(), json={"action": "pause", "filter": {"q": "t"}}
    )
    assert refused.status_code == 400
    assert refused.json()["error"] == "filter: matches more than 10,000 schedules: narrow it"
    assert store.get("t00000").enabled is True


def test_applying_a_filter_is_refused_when_it_now_matches_another_number(
    client: Client, store: ScheduleStore
) -> None:
    three(store)
    csrf = log_in(client)
    page = client.get("/bulk?action=pause&all=1&task=t.bill")
    hidden = re.findall(r'<input type="hidden" name="(\w+)" value="([^"]*)">', page.text)
    form = [(key, value) for key, value in hidden if key != "csrf"]
    assert ("expected", "2") in form
    store.add("d-billing", "t.bill", every(60))  # matched after the preview
    refused = client.post("/bulk", data=as_form([*form, ("csrf", csrf)]))
    assert refused.status_code == 400
    assert "the filter now matches 3 schedules, not 2: preview again" in refused.text.lower()
    assert all(s.enabled for s in store.list())  # nothing applied
    without = [(key, value) for key, value in form if key != "expected"]
    assert client.post("/bulk", data=as_form([*without, ("csrf", csrf)])).status_code == 400
    assert all(s.enabled for s in store.list())
    again = client.get("/bulk?action=pause&all=1&task=t.bill").text
    hidden = re.findall(r'<input type="hidden" name="(\w+)" value="([^"]*)">', again)
    form = [(key, value) for key, value in hidden if key != "csrf"]
    assert client.post("/bulk", data=as_form([*form, ("csrf", csrf)])).status_code == 303
    assert [s.enabled for s in store.list()] == [False, False, True, False]


def test_a_zone_filter_selects_for_bulk_exactly_what_the_list_shows(
    client: Client, store: ScheduleStore
) -> None:
    store.add("a-utc", "t.noop", cron("0 2 * * *", "UTC"))
    store.add("b-etc-utc", "t.noop", cron("0 2 * * *", "Etc/UTC"))
    store.add("c-every", "t.noop", every(60))
    for zone, names in (("UTC", ["a-utc", "c-every"]), ("Etc/UTC", ["b-etc-utc"])):
        listed = client.get(f"/api/schedules?zone={zone}").json()
        assert [row["name"] for row in listed] == names, zone
        preview = bulk(client, action="pause", filter={"zone": zone}, dry_run=True)
        assert [line["name"] for line in preview["results"]] == names, zone
    bulk(client, action="pause", filter={"zone": "UTC"})
    assert store.get("b-etc-utc").enabled is True
    assert store.get("a-utc").enabled is False
