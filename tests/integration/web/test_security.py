"""Who may act: tokens, read-only consoles, sessions and CSRF; escaping; no secrets shown;
GET changes nothing."""

from __future__ import annotations

import re
from datetime import datetime, timezone
from typing import Any
from urllib.parse import quote

import pytest
from celery import Celery
from sqlalchemy import select
from sqlalchemy.engine import make_url

from celery_gaffer import ScheduleStore, every
from celery_gaffer.store import database_for
from celery_gaffer.store.models import table_of
from celery_gaffer.web import create_app

from ...support import FrozenClock
from .conftest import SCRIPT_NAME, TOKEN, Client, bearer, csrf_of, insert_fire, insert_run, log_in

UTC = timezone.utc
ESCAPED = "&lt;script&gt;alert(1)&lt;/script&gt;"


def test_api_writes_without_the_token_are_401_and_change_nothing(
    client: Client, store: ScheduleStore
) -> None:
    store.add("job", "t.noop", every(60))
    for headers in ({}, bearer("wrong-token"), {"Authorization": TOKEN}):
        response = client.post("/api/schedules/job/pause", headers=headers)
        assert response.status_code == 401
        assert "Bearer" in response.json()["error"]
    assert client.patch("/api/schedules/job", json={"every": 30}).status_code == 401
    assert store.get("job").enabled is True
    assert store.get("job").schedule == every(60)


def test_a_read_only_console_refuses_every_action_with_403(
    read_only: Client, store: ScheduleStore
) -> None:
    store.add("job", "t.noop", every(60))
    api = read_only.post("/api/schedules/job/pause", headers=bearer())
    assert api.status_code == 403
    assert "read-only" in api.json()["error"]
    assert read_only.patch("/api/schedules/job", json={"every": 30}).status_code == 403
    page = read_only.post("/schedules/job/pause", data={"csrf": "x"})
    assert page.status_code == 403
    assert "read-only" in page.text
    assert read_only.post("/login", data={"token": ""}).status_code == 403
    detail = read_only.get("/schedules/job").text
    assert 'id="pause"' not in detail
    assert 'name="csrf"' not in detail
    assert "read-only" in detail
    assert store.get("job").enabled is True


def test_page_actions_need_a_session_and_its_csrf_token(
    client: Client, store: ScheduleStore
) -> None:
    store.add("job", "t.noop", every(60))
    assert client.post("/schedules/job/pause", data={"csrf": "x"}).status_code == 401
    assert 'id="pause"' not in client.get("/schedules/job").text
    csrf = log_in(client)
    assert client.post("/schedules/job/pause").status_code == 403
    assert client.post("/schedules/job/pause", data={"csrf": "0" * 64}).status_code == 403
    assert store.get("job").enabled is True
    done = client.post("/schedules/job/pause", data={"csrf": csrf})
    assert done.status_code == 303
    assert done.headers["location"] == "/schedules/job"
    assert store.get("job").enabled is False
    page = client.get("/schedules/job").text
    assert '<span class="state paused" id="state">paused</span>' in page
    assert "paused job" in page  # the flash line, shown once
    assert "paused job" not in client.get("/schedules/job").text


def test_login_sets_a_strict_http_only_session_tied_to_the_token(
    celery_app: Celery, clock: FrozenClock, client: Client
) -> None:
    wrong = client.post("/login", data={"token": "guess"})
    assert wrong.status_code == 401
    assert "gaffer_session" not in wrong.headers.get("set-cookie", "")
    right = client.post("/login", data={"token": TOKEN})
    cookie = right.headers["set-cookie"]
    assert cookie.startswith("gaffer_session=")
    assert "HttpOnly" in cookie
    assert "SameSite=strict" in cookie
    assert "Path=/" in cookie
    assert TOKEN not in cookie
    session = client.http.cookies["gaffer_session"]
    # Another token: the old session no longer logs in.
    other = Client(create_app(celery_app, token="another-token", clock=clock))
    other.http.cookies.set("gaffer_session", session)
    try:
        assert 'id="login-link"' in other.get("/schedules").text
    finally:
        other.close()
    csrf = csrf_of(client.get("/schedules").text)
    assert client.post("/logout", data={"csrf": csrf}).status_code == 303
    assert 'id="login-link"' in client.get("/schedules").text


def test_resume_shows_its_preview_and_applies_only_once_confirmed(
    clock: FrozenClock, client: Client, store: ScheduleStore
) -> None:
    store.add("job", "t.noop", every(60))
    store.pause("job")
    clock.advance(300)
    csrf = log_in(client)
    shown = client.post("/schedules/job/resume", data={"csrf": csrf})
    assert shown.status_code == 200
    assert 'id="summary"' in shown.text
    assert 'id="confirm"' in shown.text
    assert '<input type="hidden" name="confirm" value="1">' in shown.text
    assert store.get("job").enabled is False
    done = client.post("/schedules/job/resume", data={"csrf": csrf, "confirm": "1"})
    assert done.status_code == 303
    assert store.get("job").enabled is True


def test_an_edit_form_is_previewed_then_applied(client: Client, store: ScheduleStore) -> None:
    store.add("job", "t.noop", every(60))
    csrf = log_in(client)
    form = {"csrf": csrf, "every": "300", "cron": "", "kwargs": '{"region": "eu"}'}
    shown = client.post("/schedules/job/edit", data=form)
    assert shown.status_code == 200, shown.text
    hidden = dict(re.findall(r'<input type="hidden" name="(\w+)" value="([^"]*)">', shown.text))
    assert hidden["every"] == "300"
    assert hidden["confirm"] == "1"
    assert store.get("job").schedule == every(60)
    bad = client.post("/schedules/job/edit", data={"csrf": csrf, "grace": "soon"})
    assert bad.status_code == 400
    assert "grace" in bad.text
    done = client.post("/schedules/job/edit", data={**form, "confirm": "1"})
    assert done.status_code == 303
    assert store.get("job").schedule == every(300)
    assert store.get("job").kwargs == {"region": "eu"}


def test_a_script_name_is_shown_escaped_everywhere(
    celery_app: Celery, clock: FrozenClock, client: Client, store: ScheduleStore
) -> None:
    store.add(SCRIPT_NAME, "t.noop", every(60), args=["</td><script>alert(2)</script>"])
    insert_run(
        celery_app,
        SCRIPT_NAME,
        clock.now,
        state="failed",
        error_message="<img src=x onerror=alert(3)>",
    )
    clock.advance(600)
    csrf = log_in(client)
    path = "/schedules/" + quote(SCRIPT_NAME, safe="")
    assert client.post(f"{path}/pause", data={"csrf": csrf}).status_code == 303
    pages = ["/schedules", path, "/runs", "/alerts", f"/runs?schedule={quote(SCRIPT_NAME)}"]
    pages.append("/schedules?q=" + quote("<script>"))
    for url in pages:
        response = client.get(url)
        assert response.status_code == 200, url
        # The one script is the console's own, served from its own origin.
        assert response.text.count("<script") == 1, url
        assert '<script src="/console.js"></script>' in response.text, url
        assert "<img" not in response.text, url
    listing = client.get("/schedules").text
    assert f'<tr data-schedule="{ESCAPED}">' in listing
    detail = client.get(path).text
    assert ESCAPED in detail
    assert "&lt;img src=x onerror=alert(3)&gt;" in detail
    assert client.get("/api/schedules").json()[0]["name"] == SCRIPT_NAME


def test_security_headers_on_every_response(client: Client) -> None:
    for url in ("/schedules", "/api/schedules", "/console.css", "/nowhere"):
        headers = client.get(url).headers
        assert headers["content-security-policy"].startswith("default-src 'self'")
        assert headers["x-frame-options"] == "DENY"
        assert headers["referrer-policy"] == "no-referrer"


def _snapshot(app: Celery) -> list[Any]:
    database = database_for(app)
    models = database.models
    with database.read() as conn:
        return [
            sorted(map(tuple, conn.execute(select(table_of(model))).all()), key=repr)
            for model in (models.Schedule, models.Fire, models.JobRun, models.Lease)
        ]


def _every_get(client: Client, name: str) -> list[Any]:
    responses = []
    for url in (
        "/",
        "/schedules",
        "/schedules?state=late",
        "/schedules?q=jo",
        f"/schedules/{name}",
        "/runs",
        "/runs?state=failed",
        "/alerts",
        "/login",
        "/console.css",
        f"/schedules/{name}/pause",
        f"/schedules/{name}/trigger",
        "/api/schedules",
        f"/api/schedules/{name}",
        "/api/runs",
        "/api/alerts",
        f"/api/schedules/{name}/pause",
        f"/api/schedules/{name}/trigger",
    ):
        responses.append(client.get(url, headers=bearer()))
    return responses


def test_get_never_changes_anything(
    celery_app: Celery, clock: FrozenClock, client: Client, store: ScheduleStore
) -> None:
    store.add("job", "t.noop", every(60))
    insert_fire(celery_app, "job", datetime(2026, 6, 1, 11, 59, tzinfo=UTC))
    insert_run(celery_app, "job", datetime(2026, 6, 1, 11, 59, tzinfo=UTC))
    clock.advance(600)  # late: the pages evaluate its health live, and write nothing
    log_in(client)
    before = _snapshot(celery_app)
    for response in _every_get(client, "job"):
        assert response.status_code in (200, 302, 404, 405), response.url
    assert _snapshot(celery_app) == before
    assert store.get("job").enabled is True


def test_no_page_or_api_response_shows_the_database_url_password_or_token(
    postgres_url: str, clock: FrozenClock
) -> None:
    password = "pw-Secret-4711"
    url = make_url(postgres_url).set(password=password).render_as_string(hide_password=False)
    app = Celery("web-secret", broker="memory://", set_as_current=False)
    app.conf.gaffer_database_url = url
    app.conf.gaffer_web_token = TOKEN
    try:
        ScheduleStore(app, clock=clock, check_tasks=False).add("job", "t.noop", every(60))
        client = Client(create_app(app, clock=clock))
        try:
            log_in(client)
            responses = _every_get(client, "job")
            responses.append(client.get("/schedules/nope"))
            responses.append(client.post("/api/schedules/job/backfill", headers=bearer(), json={}))
        finally:
            client.close()
        host = make_url(url).host or "127.0.0.1"
        for response in responses:
            for secret in (password, TOKEN, make_url(url).database or "?", f"@{host}"):
                assert secret not in response.text, (response.url, secret)
                assert all(secret not in value for value in response.headers.values())
    finally:
        app.close()


@pytest.mark.parametrize("token", ["", None])
def test_create_app_reads_the_token_from_the_app_or_is_read_only(
    celery_app: Celery,
    clock: FrozenClock,
    store: ScheduleStore,
    token: str | None,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    store.add("job", "t.noop", every(60))
    monkeypatch.delenv("GAFFER_WEB_TOKEN", raising=False)
    celery_app.conf.gaffer_web_token = None
    client = Client(create_app(celery_app, token=token, clock=clock))
    try:
        assert client.post("/api/schedules/job/pause", headers=bearer("")).status_code == 403
    finally:
        client.close()
    monkeypatch.setenv("GAFFER_WEB_TOKEN", "from-env")
    client = Client(create_app(celery_app, token=token, clock=clock))
    try:
        status = client.post("/api/schedules/job/pause", headers=bearer("from-env")).status_code
        assert status == (403 if token == "" else 200)
    finally:
        client.close()


def test_an_edit_preview_shows_the_fires_in_the_new_zone(
    client: Client, store: ScheduleStore
) -> None:
    store.add("job", "t.noop", every(60))
    csrf = log_in(client)
    form = {"csrf": csrf, "cron": "30 1 * * *", "tz": "Europe/London"}
    shown = client.post("/schedules/job/edit", data=form).text
    fires = re.search(r'<ul class="fires" id="preview-fires">(.*?)</ul>', shown, re.S)
    assert fires is not None
    assert re.findall(r"<li>(.*?)</li>", fires.group(1))[0] == "2026-06-02 01:30 BST (00:30Z)"
    assert "Europe/London" in shown.split('id="summary"', 1)[1].split("</p>", 1)[0]
    assert store.get("job").schedule == every(60)


def test_json_in_an_attribute_cannot_close_it(client: Client, store: ScheduleStore) -> None:
    import html.parser

    tricky = ['" value=[0] required hidden x="', "</code><b>"]
    store.add("job", "t.noop", every(60), args=tricky)
    log_in(client)
    page = client.get("/schedules/job").text
    found: dict[str, dict[str, str | None]] = {}

    class Inputs(html.parser.HTMLParser):
        def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
            named = dict(attrs)
            if tag == "input" and named.get("name") in {"args", "kwargs"}:
                found[str(named["name"])] = named

    Inputs().feed(page)
    assert found["args"] == {
        "type": "text",
        "name": "args",
        "id": "edit-args",
        "placeholder": '["\\" value=[0] required hidden x=\\"", "</code><b>"]',
    }
    assert "<b>" not in page


@pytest.mark.parametrize(
    ("host", "status"),
    [("127.0.0.1:5557", 200), ("localhost", 200), ("[::1]:5557", 200), ("evil.example", 400)],
)
def test_only_the_allowed_host_names_are_answered(
    celery_app: Celery, clock: FrozenClock, store: ScheduleStore, host: str, status: int
) -> None:
    """A page on another domain rebound to 127.0.0.1 sends its own Host: refused."""
    store.add("job", "t.noop", every(60))
    allowed = {"127.0.0.1", "localhost", "::1"}
    client = Client(create_app(celery_app, token="", clock=clock, allowed_hosts=allowed))
    try:
        for path in ("/schedules", "/api/schedules"):
            assert client.get(path, headers={"Host": host}).status_code == status
    finally:
        client.close()


def test_any_database_error_is_a_503_without_the_url(
    client: Client, store: ScheduleStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sqlalchemy.exc import OperationalError

    from celery_gaffer.store import console_lists

    def locked(*args: Any, **kwargs: Any) -> Any:
        raise OperationalError("SELECT ...", {}, Exception("database is locked"))

    monkeypatch.setattr(console_lists, "schedule_rows", locked)
    api = client.get("/api/schedules")
    assert api.status_code == 503
    assert api.json() == {"error": "the Gaffer database is unavailable: see the console's log"}
    page = client.get("/schedules")
    assert page.status_code == 503
    assert "unavailable" in page.text
