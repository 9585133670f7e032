"""The console's JSON API over HTTP: reads, and actions with a Bearer token."""

from __future__ import annotations

from datetime import datetime, timezone

from celery import Celery

from celery_gaffer import ScheduleStore, cron, every

from ...support import FrozenClock
from .conftest import Client, bearer, insert_fire, insert_run, tick_beat

UTC = timezone.utc


def test_api_schedules_are_objects_with_name_state_and_next_fire(
    client: Client, store: ScheduleStore
) -> None:
    store.add("nightly", "t.noop", cron("30 1 * * *", "Europe/London"), args=[1])
    store.add("paused-one", "t.noop", every(60))
    store.pause("paused-one")
    response = client.get("/api/schedules")
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    body = response.json()
    assert [s["name"] for s in body] == ["nightly", "paused-one"]
    nightly = body[0]
    assert nightly["state"] == "ok"
    assert nightly["next_fire_at"] == "2026-06-02T00:30:00Z"
    assert nightly["schedule"] == "cron '30 1 * * *' Europe/London"
    assert nightly["zone"] == "Europe/London"
    assert nightly["task"] == "t.noop"
    assert nightly["source"] == "db"
    assert nightly["args"] == [1]
    assert nightly["reason"] == ""
    assert nightly["last_run"] is None
    assert body[1]["state"] == "paused"
    assert body[1]["next_fire_at"] is None
    assert "link" not in response.headers


def test_api_schedules_page_by_name_with_a_next_link(client: Client, store: ScheduleStore) -> None:
    store.add_many({"name": f"n{i:02d}", "task": "t.noop", "schedule": every(60)} for i in range(7))
    first = client.get("/api/schedules?limit=3")
    assert [s["name"] for s in first.json()] == ["n00", "n01", "n02"]
    assert first.headers["link"] == '</api/schedules?limit=3&after=n02>; rel="next"'
    second = client.get("/api/schedules?limit=3&after=n02")
    assert [s["name"] for s in second.json()] == ["n03", "n04", "n05"]
    assert client.get("/api/schedules?state=paused").json() == []
    assert client.get("/api/schedules?limit=0").status_code == 400
    assert client.get("/api/schedules?limit=0").json()["error"].startswith("limit:")


def test_api_schedule_detail_has_next_fires_ledger_and_runs(
    celery_app: Celery, client: Client, store: ScheduleStore
) -> None:
    store.add("hourly", "t.noop", every(3600))
    nominal = datetime(2026, 6, 1, 11, 0, tzinfo=UTC)
    insert_fire(celery_app, "hourly", nominal, publish_count=3)
    insert_run(
        celery_app,
        "hourly",
        nominal,
        fence=4,
        state="failed",
        error_type="KeyError",
        error_message="'x'",
    )
    body = client.get("/api/schedules/hourly").json()
    assert body["name"] == "hourly"
    assert [f["at"] for f in body["next_fires"][:2]] == [
        "2026-06-01T13:00:00Z",
        "2026-06-01T14:00:00Z",
    ]
    assert body["fires"] == [
        {
            "nominal_at": "2026-06-01T11:00:00Z",
            "kind": "scheduled",
            "state": "sent",
            "publish_count": 3,
            "key": "hourly@2026-06-01T11:00:00Z",
            "sent_at": "2026-06-01T11:00:00Z",
        }
    ]
    (run,) = body["runs"]
    assert (run["state"], run["fence"], run["key"]) == ("failed", 4, "hourly@2026-06-01T11:00:00Z")
    assert run["reason"] == "KeyError: 'x'"
    # The list shows the latest run of each schedule.
    listed = client.get("/api/schedules").json()[0]
    assert listed["last_run"]["state"] == "failed"
    missing = client.get("/api/schedules/nope")
    assert missing.status_code == 404
    assert missing.json() == {"error": "name: no schedule named 'nope'"}


def test_api_runs_and_alerts(
    celery_app: Celery, clock: FrozenClock, client: Client, store: ScheduleStore
) -> None:
    store.add("every-minute", "t.noop", every(60))
    insert_run(celery_app, "every-minute", clock.now, state="lost", error_message="worker died")
    insert_run(celery_app, None, clock.now, task_id="adhoc", state="succeeded")
    assert [r["state"] for r in client.get("/api/runs").json()] == ["succeeded", "lost"]
    lost = client.get("/api/runs?state=lost").json()
    assert [(r["schedule"], r["reason"]) for r in lost] == [("every-minute", "worker died")]
    assert client.get("/api/alerts").json() == []
    clock.advance(300)
    tick_beat(celery_app, clock.now)  # Beat runs (it is behind): the reason quotes the fire
    (alert,) = client.get("/api/alerts").json()
    assert alert["schedule"] == "every-minute"
    assert alert["state"] == "late"
    assert alert["reason"] == "the fire of 2026-06-01 12:04:00Z has not succeeded"


def test_api_pause_and_resume_with_the_token_change_the_database(
    client: Client, store: ScheduleStore, clock: FrozenClock
) -> None:
    store.add("job", "t.noop", every(60))
    response = client.post("/api/schedules/job/pause", headers=bearer())
    assert response.status_code == 200
    assert response.json()["done"] == "pause"
    assert store.get("job").enabled is False
    clock.advance(600)
    preview = client.post("/api/schedules/job/resume", headers=bearer(), json={"dry_run": True})
    assert preview.status_code == 200
    found = preview.json()["preview"]
    assert found["skipped"] == 10
    assert "10" in found["summary"]
    assert found["fires"][0] == "2026-06-01T12:11:00Z"
    assert store.get("job").enabled is False  # a dry run writes nothing
    assert client.post("/api/schedules/job/resume", headers=bearer()).status_code == 200
    resumed = store.get("job")
    assert resumed.enabled is True
    assert resumed.next_fire_at == datetime(2026, 6, 1, 12, 11, tzinfo=UTC)


def test_api_edit_previews_then_applies_and_names_a_bad_field(
    client: Client, store: ScheduleStore
) -> None:
    store.add("report", "t.noop", cron("0 9 * * *", "UTC"))
    dry = client.patch(
        "/api/schedules/report", headers=bearer(), json={"cron": "30 1 * * *", "dry_run": True}
    )
    assert dry.status_code == 200, dry.text
    assert "30 1 * * *" in dry.json()["preview"]["summary"]
    assert store.get("report").schedule == cron("0 9 * * *", "UTC")
    done = client.patch(
        "/api/schedules/report",
        headers=bearer(),
        json={"cron": "30 1 * * *", "tz": "Europe/London", "grace": 120},
    )
    assert done.status_code == 200, done.text
    edited = store.get("report")
    assert edited.schedule == cron("30 1 * * *", "Europe/London")
    assert edited.policy.grace == 120
    bad = client.patch("/api/schedules/report", headers=bearer(), json={"tz": "Mars/Olympus"})
    assert bad.status_code == 400
    assert bad.json()["error"].startswith("tz")
    unknown = client.patch("/api/schedules/report", headers=bearer(), json={"colour": "red"})
    assert unknown.json() == {"error": "colour: not an editable field"}
    assert store.get("report").schedule == cron("30 1 * * *", "Europe/London")


def test_api_backfill_previews_and_sends_the_missing_fires(
    celery_app: Celery, client: Client, store: ScheduleStore
) -> None:
    store.add("hourly", "t.noop", every(3600))
    insert_fire(celery_app, "hourly", datetime(2026, 6, 1, 9, 0, tzinfo=UTC))
    window = {"from": "2026-06-01T07:30Z", "to": "2026-06-01T10:30Z"}
    dry = client.post(
        "/api/schedules/hourly/backfill", headers=bearer(), json={**window, "dry_run": True}
    )
    assert dry.status_code == 200, dry.text
    preview = dry.json()["preview"]
    assert preview["fires"] == ["2026-06-01T08:00:00Z", "2026-06-01T10:00:00Z"]
    assert preview["skipped"] == 1
    done = client.post("/api/schedules/hourly/backfill", headers=bearer(), json=window)
    assert done.status_code == 200, done.text
    assert (done.json()["sent"], done.json()["already"]) == (2, 1)
    ledger = client.get("/api/schedules/hourly").json()["fires"]
    assert sorted(f["nominal_at"] for f in ledger if f["kind"] == "backfill") == [
        "2026-06-01T08:00:00Z",
        "2026-06-01T10:00:00Z",
    ]
    bad = client.post("/api/schedules/hourly/backfill", headers=bearer(), json={"from": "soon"})
    assert bad.status_code == 400
    assert bad.json()["error"].startswith("from:")


def test_api_trigger_sends_one_fire_with_its_own_key(client: Client, store: ScheduleStore) -> None:
    store.add("job", "t.noop", every(3600))
    response = client.post("/api/schedules/job/trigger", headers=bearer())
    assert response.status_code == 200, response.text
    key = response.json()["key"]
    assert key.startswith("job@")
    fires = client.get("/api/schedules/job").json()["fires"]
    assert [(f["kind"], f["key"]) for f in fires] == [("manual", key)]
