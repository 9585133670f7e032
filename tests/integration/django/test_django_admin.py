"""The Django admin of the Gaffer tables, through Django's test Client as a superuser,
on PostgreSQL and SQLite: the pages render, a page costs the same few queries however
many schedules there are, and the actions write the audit log as the Django user."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

import pytest
from sqlalchemy import text

from celery_gaffer import ScheduleStore, cron, every

ADMIN = "/admin/gaffer/"


@pytest.fixture
def client(gaffer_alias: str) -> Any:
    from django.contrib.auth.models import User
    from django.test import Client

    user, _ = User.objects.get_or_create(
        username="ada", defaults={"is_staff": True, "is_superuser": True}
    )
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def store(celery_gaffer_app: Any) -> ScheduleStore:
    return ScheduleStore(celery_gaffer_app, check_tasks=False)


def page(client: Any, url: str, **query: str) -> str:
    response = client.get(url, query)
    assert response.status_code == 200, response.content[:2000]
    return str(response.content.decode())


def test_the_schedule_list_shows_state_reason_zone_and_next_fire(
    client: Any, store: ScheduleStore
) -> None:
    store.add("nightly", "t.report", cron("30 2 * * *", "Europe/Berlin"))
    store.add("poll", "t.report", every(90))
    store.pause("poll", note="vendor down")
    html = page(client, f"{ADMIN}schedule/")
    assert "nightly" in html
    assert "cron &#x27;30 2 * * *&#x27; Europe/Berlin" in html
    assert "CET" in html or "CEST" in html  # the next fire on Berlin's clock
    assert "paused: vendor down" in html
    assert "every 90s" in html
    filtered = page(client, f"{ADMIN}schedule/", state="paused")
    assert "poll" in filtered
    assert "nightly" not in filtered
    assert "nightly" in page(client, f"{ADMIN}schedule/", q="night")


def test_the_list_shows_each_schedules_latest_scheduled_run(
    client: Any, store: ScheduleStore
) -> None:
    store.add("poll", "t.report", every(60))
    store.add("idle", "t.report", every(60))
    insert = text(
        "INSERT INTO gaffer_job_runs (task_id, task_name, schedule, nominal_at, attempt, state,"
        " updated_at, created_at) VALUES (:id, 't.report', 'poll', :at, 1, :state, :at, :at)"
    )
    with store.database.engine.begin() as conn:
        for number, state in enumerate(["failed", "succeeded", "retried"]):
            at = datetime(2026, 1, 1, 10, number, tzinfo=timezone.utc)
            conn.execute(insert, {"id": f"r{number}", "at": at, "state": state})
    html = page(client, f"{ADMIN}schedule/")
    assert '<td class="field-last_run">retried</td>' in html
    assert '<td class="field-last_run">-</td>' in html


def test_a_schedule_page_shows_its_next_fires_and_its_audit_history(
    client: Any, store: ScheduleStore
) -> None:
    store.add("nightly", "t.report", cron("30 2 * * *", "UTC"))
    store.pause("nightly", note="maintenance")
    from celery_gaffer.contrib.django.models import Schedule

    row = Schedule.objects.using(_alias(store)).get(name="nightly")
    html = page(client, f"{ADMIN}schedule/{row.pk}/change/")
    assert "if resumed now" in html
    assert "02:30:00Z" in html
    assert "maintenance" in html
    assert html.count("<td>pause</td>") == 1
    assert html.count("<td>add</td>") == 1
    assert 'name="_save"' not in html  # read-only


def test_a_schedule_page_gives_each_fire_its_calendar_skips_or_moves_its_reason(
    client: Any, store: ScheduleStore
) -> None:
    store.add_calendar("freeze", ["2099-12-28"])
    store.add(
        "mondays", "t.report", cron("0 9 * * 1", "UTC"),
        gaffer={"skip_on": ["freeze"], "on_skip": "next_day"},
    )  # fmt: skip
    # Beat's state before the frozen Monday, whatever the day the test runs.
    with store.database.engine.begin() as conn:
        conn.execute(
            text("UPDATE gaffer_schedules SET watermark_at = :at, next_fire_at = :next"),
            {"at": datetime(2099, 12, 27, 12, tzinfo=timezone.utc),
             "next": datetime(2099, 12, 29, 9, tzinfo=timezone.utc)},
        )  # fmt: skip
    from celery_gaffer.contrib.django.models import Schedule

    row = Schedule.objects.using(_alias(store)).get(name="mondays")
    html = page(client, f"{ADMIN}schedule/{row.pk}/change/")
    assert "2099-12-28 09:00:00Z (calendar: 2099-12-28: in freeze → moved to 2099-12-29)" in html
    assert "2100-01-04 09:00:00Z</li>" in html


def _alias(store: ScheduleStore) -> str:
    return str(store.app.conf.gaffer_database_url).removeprefix("django://")


def test_runs_and_audit_pages_render(client: Any, store: ScheduleStore) -> None:
    store.add("poll", "t.report", every(60))
    assert "poll" in page(client, f"{ADMIN}auditentry/")
    assert "poll" in page(client, f"{ADMIN}auditentry/", source="code", action="add")
    page(client, f"{ADMIN}jobrun/")
    page(client, f"{ADMIN}jobrun/", state="failure")


def queries_of_list(client: Any, alias: str) -> int:
    from django.db import connections
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connections[alias]) as captured:
        page(client, f"{ADMIN}schedule/")
    return len(captured.captured_queries)


def test_a_list_page_costs_the_same_few_queries_for_5_or_150_schedules(
    client: Any, store: ScheduleStore, gaffer_alias: str
) -> None:
    store.add_many(
        {"name": f"s{i:03}", "task": "t.report", "schedule": every(60)} for i in range(5)
    )
    few = queries_of_list(client, gaffer_alias)
    store.add_many(
        {"name": f"t{i:03}", "task": "t.report", "schedule": every(60)} for i in range(145)
    )
    assert queries_of_list(client, gaffer_alias) == few
    # The page, its count and its rows' latest runs on the Gaffer database (and the
    # session and user on
    # PostgreSQL, where Django's own tables are too).
    assert few <= (5 if gaffer_alias == "default" else 3)


def selected(store: ScheduleStore, *names: str) -> list[str]:
    from celery_gaffer.contrib.django.models import Schedule

    rows = Schedule.objects.using(_alias(store)).filter(name__in=names)
    return [str(pk) for pk in rows.values_list("pk", flat=True)]


def test_pause_with_a_note_asks_then_pauses_as_the_django_user(
    client: Any, store: ScheduleStore
) -> None:
    store.add("a", "t.report", every(60))
    store.add("b", "t.report", every(60))
    pks = selected(store, "a", "b")
    form = client.post(f"{ADMIN}schedule/", {"action": "pause", "_selected_action": pks})
    assert form.status_code == 200
    assert 'name="note"' in form.content.decode()
    assert store.get("a").enabled  # nothing yet
    done = client.post(
        f"{ADMIN}schedule/",
        {"action": "pause", "_selected_action": pks, "apply": "1", "note": "deploy", "until": "2h"},
        follow=True,
    )
    assert "Paused: a, b" in done.content.decode()
    paused = store.get("a")
    assert not paused.enabled
    assert paused.paused_note == "deploy"
    assert paused.paused_until is not None
    assert paused.paused_until > datetime.now(timezone.utc)
    entry = store.audit("a", limit=1)[0]
    assert (entry.actor, entry.source, entry.action, entry.note) == (
        "ada",
        "admin",
        "pause",
        "deploy",
    )


def test_a_bad_until_shows_the_form_again_and_pauses_nothing(
    client: Any, store: ScheduleStore
) -> None:
    store.add("a", "t.report", every(60))
    response = client.post(
        f"{ADMIN}schedule/",
        {
            "action": "pause",
            "_selected_action": selected(store, "a"),
            "apply": "1",
            "until": "soon",
        },
    )
    assert response.status_code == 200
    assert "neither a duration" in response.content.decode()
    assert store.get("a").enabled


def test_resume_and_run_now_are_recorded_as_the_django_user(
    client: Any, store: ScheduleStore
) -> None:
    store.add("a", "t.report", every(60))
    store.pause("a")
    pks = selected(store, "a")
    client.post(f"{ADMIN}schedule/", {"action": "resume", "_selected_action": pks})
    assert store.get("a").enabled
    client.post(f"{ADMIN}schedule/", {"action": "run_now", "_selected_action": pks})
    actions = [(e.action, e.actor, e.source) for e in store.audit("a", limit=2)]
    assert actions == [("trigger", "ada", "admin"), ("resume", "ada", "admin")]


def test_a_failing_action_says_why_and_the_others_are_done(
    client: Any, store: ScheduleStore
) -> None:
    store.add("a", "t.report", every(60))
    store.add("b", "t.report", every(60))
    with store.database.engine.begin() as conn:  # in error: not resumable
        conn.execute(text("UPDATE gaffer_schedules SET error = 'broken' WHERE name = 'b'"))
    pks = selected(store, "a", "b")
    response = client.post(
        f"{ADMIN}schedule/", {"action": "run_now", "_selected_action": pks}, follow=True
    )
    html = response.content.decode()
    assert "Sent one fire of: a<" in html
    assert "B: " in html  # its error, named


def test_a_user_without_the_change_permission_gets_no_action(
    client: Any, store: ScheduleStore
) -> None:
    from django.contrib.auth.models import Permission, User
    from django.test import Client

    viewer, _ = User.objects.get_or_create(username="viewer", defaults={"is_staff": True})
    viewer.user_permissions.set(
        [Permission.objects.get(codename="view_schedule", content_type__app_label="gaffer")]
    )
    store.add("a", "t.report", every(60))
    other = Client()
    other.force_login(viewer)
    html = page(other, f"{ADMIN}schedule/")
    assert "Pause with a note" not in html
    other.post(f"{ADMIN}schedule/", {"action": "resume", "_selected_action": selected(store, "a")})
    store.pause("a")
    other.post(f"{ADMIN}schedule/", {"action": "resume", "_selected_action": selected(store, "a")})
    assert not store.get("a").enabled
    assert "Pause with a note" in page(client, f"{ADMIN}schedule/")
