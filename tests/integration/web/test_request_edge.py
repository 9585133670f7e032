"""What the console refuses before a route reads it, and the input it decodes bounded: deep
JSON is a 400 naming the field, NUL in a path or query is a 400 (not an unavailable
database), a body over its cap is a 413 before it is read, an unknown codec is refused."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest
from celery import Celery
from sqlalchemy import JSON, Text, cast, literal, update

from celery_gaffer import Scheduler, ScheduleStore, every
from celery_gaffer.store import database_for
from celery_gaffer.store.models import table_of
from celery_gaffer.web import create_app
from celery_gaffer.web.edge import ACTION_BODY_LIMIT, FORM_BODY_LIMIT, body_limit

from ...support import FrozenClock
from .conftest import TOKEN, Client, bearer, log_in

DEEP = "[" * 50_000 + "]" * 50_000  # Python's decoder runs out of stack on this
NESTED_65 = "[" * 65 + "]" * 65  # decodes, but nests deeper than any input may


@pytest.mark.parametrize("text", [DEEP, NESTED_65])
def test_deep_json_in_the_edit_form_is_a_400_naming_the_field(
    client: Client, store: ScheduleStore, text: str
) -> None:
    store.add("job", "t.noop", every(60))
    csrf = log_in(client)
    response = client.post("/schedules/job/edit", data={"csrf": csrf, "args": text})
    assert response.status_code == 400
    assert "args: JSON nested deeper than 64 levels" in response.text
    assert store.get("job").args == []


@pytest.mark.parametrize("text", [DEEP, NESTED_65])
def test_a_deep_api_body_is_a_400_naming_the_body(
    client: Client, store: ScheduleStore, text: str
) -> None:
    store.add("job", "t.noop", every(60))
    body = '{"args": ' + text + "}"
    response = client.patch(
        "/api/schedules/job",
        headers={**bearer(), "content-type": "application/json"},
        content=body,
    )
    assert response.status_code == 400
    assert response.json() == {"error": "body: JSON nested deeper than 64 levels"}
    assert store.get("job").args == []


@pytest.mark.parametrize(
    "url",
    [
        "/schedules?q=%00",
        "/schedules?q=a%00b",
        "/schedules/a%00b",
        "/runs?schedule=%00",
        "/api/schedules?q=%00",
        "/api/schedules/a%00b",
        "/api/runs?schedule=x%00",
    ],
)
def test_nul_in_a_path_or_query_is_a_400_and_logs_no_error(
    client: Client, store: ScheduleStore, url: str, caplog: pytest.LogCaptureFixture
) -> None:
    store.add("job", "t.noop", every(60))
    with caplog.at_level(logging.INFO, logger="celery_gaffer"):
        response = client.get(url)
    assert response.status_code == 400
    assert "NUL" in response.text
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
    if url.startswith("/api/"):
        assert response.json() == {"error": "NUL is not allowed in a path or query"}


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ('{"compression": "bogus"}', "options.compression"),
        ('{"serializer": "pickle"}', "options.serializer"),
    ],
)
def test_an_unknown_codec_is_refused_by_the_console_and_the_api(
    client: Client, store: ScheduleStore, options: str, field: str
) -> None:
    store.add("job", "t.noop", every(60))
    csrf = log_in(client)
    page = client.post(
        "/schedules/job/edit", data={"csrf": csrf, "options": options, "confirm": "1"}
    )
    assert page.status_code == 400
    assert field in page.text
    api = client.patch(
        "/api/schedules/job", headers=bearer(), content='{"options": ' + options + "}"
    )
    assert api.status_code == 400
    assert api.json()["error"].startswith(field)
    assert store.get("job").options == {}


def test_an_edit_form_within_the_cap_is_answered(client: Client, store: ScheduleStore) -> None:
    store.add("job", "t.noop", every(60))
    csrf = log_in(client)
    args = '["' + "\\u00e9" * 6_000 + '"]'  # escaped twice over in the form: ~200 KB
    form = {"csrf": csrf, "args": args, "confirm": "1"}
    response = client.post("/schedules/job/edit", data=form)
    assert response.status_code == 303, response.text
    assert store.get("job").args == ["\u00e9" * 6_000]


def test_a_row_too_deep_to_decode_is_listed_in_error_by_the_pages_and_the_api(
    celery_app: Celery, client: Client, store: ScheduleStore, clock: FrozenClock
) -> None:
    store.add("healthy", "t.noop", every(60))
    store.add("deep", "t.noop", every(60))
    database = database_for(celery_app)
    table = table_of(database.models.Schedule)
    with database.begin() as conn:
        value: Any = literal("[" * 5_000 + "]" * 5_000, Text)  # PostgreSQL parses this deep
        if conn.dialect.name == "postgresql":
            value = cast(value, JSON)  # SQLite would CAST the text to a number
        conn.execute(update(table).where(table.c.name == "deep").values(args=value))
    page = client.get("/schedules")
    assert page.status_code == 200
    assert "args: JSON nested deeper than 64 levels" in page.text
    assert client.get("/schedules/deep").status_code == 200
    listed = {row["name"]: row for row in client.get("/api/schedules").json()}
    assert listed["deep"]["state"] == "error"
    assert listed["healthy"]["state"] != "error"
    # Once Beat has loaded it, the error is stored: an alert like any other.
    clock.advance(60)
    Scheduler(celery_app, clock=clock).tick()
    alerts = {alert["schedule"]: alert for alert in client.get("/api/alerts").json()}
    assert alerts["deep"]["state"] == "error"
    assert "args: JSON nested deeper than 64 levels" in alerts["deep"]["reason"]


# -- body caps, at the ASGI level: how much of the body the app reads -------------------

HUGE = 100 * 1024 * 1024
CHUNK = 64 * 1024


class Upload:
    """An ASGI request of ``size`` bytes sent in chunks, counting what the app reads."""

    def __init__(self, path: str, size: int, *, declare: bool) -> None:
        headers = [
            (b"host", b"console.test"),
            (b"content-type", b"application/x-www-form-urlencoded"),
        ]
        if declare:
            headers.append((b"content-length", str(size).encode()))
        self.scope: dict[str, Any] = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": "POST",
            "scheme": "http",
            "path": path,
            "raw_path": path.encode(),
            "root_path": "",
            "query_string": b"",
            "headers": headers,
            "client": ("127.0.0.1", 5000),
            "server": ("console.test", 80),
        }
        self.left = size
        self.read = 0
        self.status: int | None = None
        self.body = b""

    async def receive(self) -> dict[str, Any]:
        if self.left <= 0:
            await anyio.sleep_forever()  # a client that keeps its connection open
        part = min(CHUNK, self.left)
        self.left -= part
        self.read += part
        return {"type": "http.request", "body": b"t" * part, "more_body": self.left > 0}

    async def send(self, message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            self.status = message["status"]
        elif message["type"] == "http.response.body":
            self.body += message.get("body", b"")

    def run(self, app: Any) -> None:
        async def main() -> None:
            with anyio.fail_after(30):
                await app(self.scope, self.receive, self.send)

        anyio.run(main)


@pytest.fixture
def console(celery_app: Celery, clock: FrozenClock) -> Any:
    return create_app(celery_app, token=TOKEN, clock=clock)


def test_a_100_mb_login_with_its_length_is_413_without_reading_the_body(console: Any) -> None:
    upload = Upload("/login", HUGE, declare=True)
    upload.run(console)
    assert upload.status == 413
    assert upload.read == 0
    assert str(FORM_BODY_LIMIT).encode() in upload.body


@pytest.mark.parametrize(
    ("path", "limit"), [("/login", FORM_BODY_LIMIT), ("/api/schedules/job", ACTION_BODY_LIMIT)]
)
def test_a_chunked_100_mb_body_is_413_once_it_passes_the_cap(
    console: Any, store: ScheduleStore, path: str, limit: int
) -> None:
    store.add("job", "t.noop", every(60))
    upload = Upload(path, HUGE, declare=False)
    if path.startswith("/api/"):
        upload.scope["method"] = "PATCH"
        upload.scope["headers"].append((b"authorization", f"Bearer {TOKEN}".encode()))
    upload.run(console)
    assert upload.status == 413
    assert limit < upload.read <= limit + CHUNK


def test_a_login_within_the_cap_still_logs_in(client: Client) -> None:
    async def body() -> AsyncIterator[bytes]:
        yield b"token="
        yield TOKEN.encode()

    response = client.post(
        "/login",
        content=body(),
        headers={"content-type": "application/x-www-form-urlencoded"},
    )
    assert response.status_code == 303


@pytest.mark.parametrize("path", ["/login", "/login/", "/logout", "/console/login"])
def test_the_login_forms_get_the_small_cap_however_their_path_is_written(path: str) -> None:
    assert body_limit(path) == FORM_BODY_LIMIT
    assert body_limit("/schedules/nightly") == ACTION_BODY_LIMIT
