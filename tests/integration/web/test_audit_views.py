"""The audit log in the console: ``GET /api/audit`` and the ``/audit`` page."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from celery import Celery

from celery_gaffer.store import database_for
from celery_gaffer.store.audit import Actor, record

from .conftest import Client

UTC = timezone.utc
START = datetime(2026, 6, 1, 9, 0, tzinfo=UTC)


def log(app: Celery, *entries: tuple[str, str, str, str, int, str | None]) -> None:
    """Entries ``(actor, source, action, schedule, minutes after 09:00, note)``, in order."""
    database = database_for(app)
    with database.begin() as conn:
        for actor, source, action, schedule, minutes, note in entries:
            record(
                conn,
                database.models,
                Actor(actor, source),
                action,
                schedule,
                START + timedelta(minutes=minutes),
                note=note,
                changes={"enabled": [True, False]} if action == "pause" else {},
            )


def history(app: Celery) -> None:
    log(
        app,
        ("alice", "console", "pause", "nightly-billing", 0, "deploy freeze"),
        ("deploy-bot", "api", "resume", "nightly-billing", 10, None),
        ("root", "cli", "add", "hourly", 20, None),
        ("beat", "beat", "error", "hourly", 30, "task t.gone is not registered"),
        ("alice", "console", "trigger", "hourly", 40, None),
    )


def test_api_audit_is_newest_first_in_the_agreed_shape(celery_app: Celery, client: Client) -> None:
    history(celery_app)
    body = client.get("/api/audit").json()
    assert [entry["action"] for entry in body] == ["trigger", "error", "add", "resume", "pause"]
    assert body[-1] == {
        "at": "2026-06-01T09:00:00+00:00",
        "actor": "alice",
        "source": "console",
        "action": "pause",
        "schedule": "nightly-billing",
        "note": "deploy freeze",
        "changes": {"enabled": [True, False]},
    }


def test_api_audit_filters_by_schedule_actor_source_and_since(
    celery_app: Celery, client: Client
) -> None:
    history(celery_app)

    def actions(query: str) -> list[str]:
        response = client.get(f"/api/audit?{query}")
        assert response.status_code == 200, response.text
        return [entry["action"] for entry in response.json()]

    assert actions("schedule=nightly-billing") == ["resume", "pause"]
    assert actions("actor=alice") == ["trigger", "pause"]
    assert actions("source=beat") == ["error"]
    assert actions("schedule=hourly&actor=alice") == ["trigger"]
    assert actions("since=2026-06-01T09:20:00Z") == ["trigger", "error", "add"]
    assert actions("schedule=nobody") == []


def test_api_audit_pages_by_id_with_a_next_link(celery_app: Celery, client: Client) -> None:
    history(celery_app)
    first = client.get("/api/audit?limit=2&actor=alice")
    assert [entry["action"] for entry in first.json()] == ["trigger", "pause"]
    first = client.get("/api/audit?limit=2")
    assert [entry["action"] for entry in first.json()] == ["trigger", "error"]
    link = first.headers["link"]
    assert link.startswith("</api/audit?before=")
    assert link.endswith('&limit=2>; rel="next"')
    second = client.get(link[1 : link.index(">")])
    assert [entry["action"] for entry in second.json()] == ["add", "resume"]


def test_api_audit_names_a_bad_field(client: Client) -> None:
    for query, field in (
        ("source=mail", "source"),
        ("since=yesterday", "since"),
        ("limit=0", "limit"),
    ):
        response = client.get(f"/api/audit?{query}")
        assert response.status_code == 400
        assert response.json()["error"].startswith(f"{field}:")


def test_the_audit_page_lists_changes_with_their_filters(
    celery_app: Celery, client: Client
) -> None:
    history(celery_app)
    page = client.get("/audit?actor=alice").text
    assert page.count("<tr data-audit=") == 2
    assert "deploy freeze" in page
    assert '<option value="console"' in page
    assert 'id="audit-actor" value="alice"' in page
    assert "<dt>enabled</dt><dd><code>true</code> → <code>false</code></dd>" in page
    filtered = client.get("/audit?source=beat").text
    assert filtered.count("<tr data-audit=") == 1
    assert "task t.gone is not registered" in filtered


def test_the_audit_page_shows_notes_as_text(celery_app: Celery, client: Client) -> None:
    log(celery_app, ("<b>mallory</b>", "api", "pause", "x", 0, "<script>alert(1)</script>"))
    page = client.get("/audit").text
    assert "<script>alert(1)</script>" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "&lt;b&gt;mallory&lt;/b&gt;" in page
