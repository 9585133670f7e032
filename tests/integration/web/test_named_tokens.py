"""Named tokens, tokens that may only read, and a pause's note and time, over HTTP on
real SQLite and PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from celery import Celery
from starlette.requests import Request

from celery_gaffer import ScheduleStore, every
from celery_gaffer.exceptions import ConfigurationError
from celery_gaffer.web import create_app
from celery_gaffer.web.security import SESSION_COOKIE, Guard
from celery_gaffer.web.tokens import SHARED_NAME, configured_tokens

from ...support import FrozenClock
from .conftest import TOKEN, Client, bearer, csrf_of, log_in

ALICE = "alice-secret-0123456789"
BOT = "deploy-bot-secret-987654"
VIEWER = "viewer-secret-5555555555"


def log_in_with(client: Client, token: str) -> str:
    """Log ``client`` in with ``token``; its session cookie."""
    response = client.post("/login", data={"token": token})
    assert response.status_code == 303, response.text
    return str(client.http.cookies[SESSION_COOKIE])


def session_name(guard: Guard, cookie: str) -> str | None:
    """The name of the token a session cookie stands for (None: not a valid session)."""
    scope = {"type": "http", "headers": [(b"cookie", f"{SESSION_COOKIE}={cookie}".encode())]}
    found = guard.session(Request(scope))
    return None if found is None else found.name


@pytest.fixture
def named(celery_app: Celery, clock: FrozenClock) -> Iterator[Client]:
    """A console with the single token and two named ones, no token that only reads."""
    celery_app.conf.gaffer_web_tokens = {"alice": ALICE, "deploy-bot": BOT}
    client = Client(create_app(celery_app, token=TOKEN, clock=clock))
    yield client
    client.close()


@pytest.fixture
def gated(celery_app: Celery, clock: FrozenClock) -> Iterator[Client]:
    """A console with a named token and a token that may only read."""
    celery_app.conf.gaffer_web_tokens = {"alice": ALICE}
    celery_app.conf.gaffer_web_read_tokens = {"viewer": VIEWER}
    client = Client(create_app(celery_app, token="", clock=clock))
    yield client
    client.close()


def test_a_named_tokens_session_knows_its_name_and_acts(
    celery_app: Celery, named: Client, store: ScheduleStore
) -> None:
    store.add("job", "t.noop", every(60))
    guard = Guard(configured_tokens(celery_app, TOKEN))
    cookie = log_in_with(named, ALICE)
    assert session_name(guard, cookie) == "alice"
    assert session_name(guard, cookie.replace("Y", "Z", 1) + "0") is None
    csrf = csrf_of(named.get("/schedules/job").text)
    assert named.post("/schedules/job/pause", data={"csrf": csrf}).status_code == 303
    assert store.get("job").enabled is False
    # The single token is named "token"; each name's session is its own.
    assert session_name(guard, log_in_with(named, TOKEN)) == SHARED_NAME
    assert session_name(guard, log_in_with(named, BOT)) == "deploy-bot"
    assert named.post("/login", data={"token": ALICE + "x"}).status_code == 401


def test_a_named_token_acts_through_the_api(named: Client, store: ScheduleStore) -> None:
    store.add("job", "t.noop", every(60))
    assert named.post("/api/schedules/job/pause", headers=bearer(BOT)).status_code == 200
    assert store.get("job").enabled is False
    assert named.post("/api/schedules/job/resume", headers=bearer("nope")).status_code == 401


def test_without_a_read_token_reading_stays_open(named: Client, store: ScheduleStore) -> None:
    store.add("job", "t.noop", every(60))
    assert named.get("/schedules").status_code == 200
    assert named.get("/api/schedules/job").status_code == 200


def test_with_a_read_token_reading_needs_a_login_or_a_token(
    gated: Client, store: ScheduleStore
) -> None:
    store.add("job", "t.noop", every(60))
    for path in ("/schedules", "/schedules/job", "/runs", "/alerts", "/runs/1", "/"):
        response = gated.get(path)
        assert response.status_code == 303, path
        assert response.headers["location"] == "/login"
    for path in ("/api/schedules", "/api/schedules/job", "/api/runs", "/api/runs/1"):
        response = gated.get(path)
        assert response.status_code == 401, path
        assert "token" in response.json()["error"]
        assert response.headers["x-frame-options"] == "DENY"  # refusals keep the headers
    assert gated.get("/login").status_code == 200
    assert gated.get("/console.css").status_code == 200
    assert gated.get("/api/schedules", headers=bearer(VIEWER)).status_code == 200
    assert gated.get("/api/schedules", headers=bearer(ALICE)).status_code == 200
    assert gated.get("/api/schedules", headers=bearer("wrong")).status_code == 401


def test_a_read_token_reads_but_may_not_act(gated: Client, store: ScheduleStore) -> None:
    store.add("job", "t.noop", every(60))
    api_pause = gated.post("/api/schedules/job/pause", headers=bearer(VIEWER))
    assert api_pause.status_code == 403
    assert "'viewer' may only read" in api_pause.json()["error"]
    log_in_with(gated, VIEWER)
    page = gated.get("/schedules/job")
    assert page.status_code == 200
    assert 'id="reader-note"' in page.text
    assert 'id="pause"' not in page.text
    csrf = csrf_of(page.text)  # the logout form's
    assert gated.post("/schedules/job/pause", data={"csrf": csrf}).status_code == 403
    assert store.get("job").enabled is True
    assert gated.post("/logout", data={"csrf": csrf}).status_code == 303
    assert gated.get("/schedules").status_code == 303  # logged out: back to the login


@pytest.mark.parametrize(
    ("conf", "key"),
    [
        ({"gaffer_web_tokens": ["alice"]}, "gaffer_web_tokens"),
        ({"gaffer_web_tokens": {"alice": ""}}, "gaffer_web_tokens"),
        ({"gaffer_web_tokens": {" alice": ALICE}}, "gaffer_web_tokens"),
        ({"gaffer_web_tokens": {"token": ALICE}}, "gaffer_web_tokens"),
        ({"gaffer_web_read_tokens": {"a\nb": VIEWER}}, "gaffer_web_read_tokens"),
        ({"gaffer_web_tokens": {"a": ALICE}, "gaffer_web_read_tokens": {"a": VIEWER}}, None),
        ({"gaffer_web_tokens": {"a": ALICE}, "gaffer_web_read_tokens": {"b": ALICE}}, None),
    ],
)
def test_bad_token_settings_stop_the_console_naming_the_key(
    celery_app: Celery, clock: FrozenClock, conf: dict[str, object], key: str | None
) -> None:
    celery_app.conf.update(conf)
    with pytest.raises(ConfigurationError) as raised:
        create_app(celery_app, token=TOKEN, clock=clock)
    assert raised.value.field == (key or "gaffer_web_read_tokens")
    assert ALICE not in str(raised.value)
    assert VIEWER not in str(raised.value)


def test_a_pause_takes_a_note_and_a_future_until_and_names_a_bad_until(
    client: Client, store: ScheduleStore
) -> None:
    store.add("job", "t.noop", every(60))
    for until in ("2026-06-01T11:00:00Z", "2026-06-02T09:00:00", "tomorrow", 5):
        response = client.post(
            "/api/schedules/job/pause", headers=bearer(), json={"until": until, "note": "x"}
        )
        assert response.status_code == 400, until
        assert response.json()["error"].startswith("until:")
    too_long = client.post("/api/schedules/job/pause", headers=bearer(), json={"note": "n" * 1001})
    assert too_long.status_code == 400
    assert too_long.json()["error"].startswith("note:")
    assert store.get("job").enabled is True  # nothing was written
    body = {"note": "billing freeze", "until": "2026-06-02T09:00:00+02:00"}
    response = client.post("/api/schedules/job/pause", headers=bearer(), json=body)
    assert response.status_code == 200
    assert response.json()["paused_until"] == "2026-06-02T07:00:00Z"
    assert response.json()["paused_note"] == "billing freeze"
    assert store.get("job").enabled is False
    shown = client.get("/api/schedules/job").json()
    assert {"paused_note", "paused_until"} <= set(shown)


def test_the_pause_form_takes_a_note_and_a_resume_time(
    client: Client, store: ScheduleStore
) -> None:
    store.add("job", "t.noop", every(60))
    csrf = log_in(client)
    page = client.get("/schedules/job").text
    assert 'name="note"' in page
    assert 'name="until"' in page
    bad = client.post("/schedules/job/pause", data={"csrf": csrf, "until": "2026-06-01T11:00Z"})
    assert bad.status_code == 400
    assert "until: 2026-06-01T11:00Z is not in the future" in bad.text
    assert store.get("job").enabled is True
    form = {"csrf": csrf, "note": "freeze", "until": "2026-06-01T13:00Z"}
    done = client.post("/schedules/job/pause", data=form)
    assert done.status_code == 303
    assert store.get("job").enabled is False
    assert "until 2026-06-01T13:00:00Z" in client.get("/schedules/job").text  # the flash


@pytest.fixture
def viewers_only(celery_app: Celery, clock: FrozenClock) -> Iterator[Client]:
    """A console whose only token may only read (no token that may act)."""
    celery_app.conf.gaffer_web_read_tokens = {"viewer": VIEWER}
    client = Client(create_app(celery_app, token="", clock=clock))
    yield client
    client.close()


def test_a_console_of_read_tokens_only_logs_in_and_out(
    viewers_only: Client, store: ScheduleStore
) -> None:
    store.add("job", "t.noop", every(60))
    form = viewers_only.get("/login").text
    assert 'id="read-tokens-note"' in form
    assert "gaffer_web_read_tokens" in form
    assert "set gaffer_web_token" not in form  # not "this console is read-only: set ..."
    assert 'id="login"' in form
    log_in_with(viewers_only, VIEWER)
    page = viewers_only.get("/schedules/job").text
    assert 'id="logout"' in page
    assert 'id="read-only-badge"' in page  # beside the Log out button
    csrf = csrf_of(page)
    assert viewers_only.post("/logout", data={"csrf": "0" * 64}).status_code == 403
    assert viewers_only.get("/schedules").status_code == 200  # still logged in
    assert viewers_only.post("/logout", data={"csrf": csrf}).status_code == 303
    assert viewers_only.get("/schedules").status_code == 303  # logged out: back to the login


def test_the_login_pages_script_and_stylesheet_need_no_token(gated: Client) -> None:
    for path in ("/console.js", "/console.css"):
        response = gated.get(path)
        assert response.status_code == 200, path
        assert response.text


def test_a_read_tokens_session_is_not_offered_bulk_apply(
    gated: Client, store: ScheduleStore
) -> None:
    store.add("job", "t.noop", every(60))
    log_in_with(gated, VIEWER)
    page = gated.get("/bulk?action=pause&name=job")
    assert page.status_code == 200
    assert 'id="bulk-apply"' not in page.text
    assert 'id="reader-note"' in page.text
    log_in_with(gated, ALICE)
    assert 'id="bulk-apply"' in gated.get("/bulk?action=pause&name=job").text
