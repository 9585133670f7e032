"""What the console and its API do is recorded under the token's name, through "console"
or "api"; a pause's note and time are kept and shown (real SQLite and PostgreSQL)."""

from __future__ import annotations

from celery import Celery

from celery_gaffer import ScheduleStore, every
from celery_gaffer.web import create_app

from ...support import FrozenClock
from .conftest import TOKEN, Client, bearer, csrf_of

ALICE = "alice-secret-0123456789"
BOT = "deploy-bot-secret-987654"


def test_actions_are_recorded_under_the_tokens_name_and_source(
    celery_app: Celery, clock: FrozenClock, store: ScheduleStore
) -> None:
    celery_app.conf.gaffer_web_tokens = {"alice": ALICE, "deploy-bot": BOT}
    client = Client(create_app(celery_app, token=TOKEN, clock=clock))
    try:
        store.add("job", "t.noop", every(60))
        assert client.post("/login", data={"token": ALICE}).status_code == 303
        csrf = csrf_of(client.get("/schedules/job").text)
        form = {"csrf": csrf, "note": "billing freeze"}
        assert client.post("/schedules/job/pause", data=form).status_code == 303
        resumed = client.post("/api/schedules/job/resume", headers=bearer(BOT))
        assert resumed.status_code == 200
        body = {"note": "again", "until": "2026-06-02T09:00:00Z"}
        paused = client.post("/api/schedules/job/pause", headers=bearer(TOKEN), json=body)
        assert paused.status_code == 200
        shown = client.get("/api/schedules/job").json()
        assert (shown["paused_note"], shown["paused_until"]) == ("again", "2026-06-02T09:00:00Z")
    finally:
        client.close()
    entries = [entry.as_json() for entry in store.audit("job")]
    assert [(e["actor"], e["source"], e["action"]) for e in entries[:3]] == [
        ("token", "api", "pause"),
        ("deploy-bot", "api", "resume"),
        ("alice", "console", "pause"),
    ]
    assert entries[2]["note"] == "billing freeze"


def test_a_pause_answer_says_what_was_kept_from_the_pause_before(
    celery_app: Celery, clock: FrozenClock, store: ScheduleStore
) -> None:
    client = Client(create_app(celery_app, token=TOKEN, clock=clock))
    store.add("job", "t.noop", every(60))
    until = "2026-06-02T09:00:00+00:00"
    first = client.post("/api/schedules/job/pause", headers=bearer(TOKEN), json={"until": until})
    assert first.json()["paused_until"] == "2026-06-02T09:00:00Z"
    again = client.post("/api/schedules/job/pause", headers=bearer(TOKEN), json={"note": "x"})
    body = again.json()
    assert (body["paused_note"], body["paused_until"]) == ("x", "2026-06-02T09:00:00Z")
    assert "resumes by itself" in body["message"]
