"""A Celery app on a fresh database, its ScheduleStore and a console client over HTTP."""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import anyio
import httpx
import pytest
from celery import Celery
from sqlalchemy import insert

from celery_gaffer import ScheduleStore
from celery_gaffer.store import beats, database_for
from celery_gaffer.store.models import table_of
from celery_gaffer.web import create_app

from ...support import FrozenClock, noop_app

TOKEN = "console-token-0123456789"
SCRIPT_NAME = "<script>alert(1)</script>"


class Client:
    """A synchronous HTTP client of an ASGI app (httpx over ASGITransport), keeping cookies."""

    def __init__(self, app: Any) -> None:
        transport = httpx.ASGITransport(app=app)
        self.http = httpx.AsyncClient(transport=transport, base_url="http://console.test")

    def request(self, method: str, url: str, **kwargs: Any) -> httpx.Response:
        async def send() -> httpx.Response:
            return await self.http.request(method, url, **kwargs)

        return anyio.run(send)

    def get(self, url: str, **kwargs: Any) -> httpx.Response:
        return self.request("GET", url, **kwargs)

    def post(self, url: str, **kwargs: Any) -> httpx.Response:
        return self.request("POST", url, **kwargs)

    def patch(self, url: str, **kwargs: Any) -> httpx.Response:
        return self.request("PATCH", url, **kwargs)

    def close(self) -> None:
        anyio.run(self.http.aclose)


@pytest.fixture
def celery_app(database_url: str) -> Iterator[Celery]:
    with noop_app("web-test", database_url) as app:
        yield app


@pytest.fixture
def store(celery_app: Celery, clock: FrozenClock) -> ScheduleStore:
    return ScheduleStore(celery_app, clock=clock)


@pytest.fixture
def client(celery_app: Celery, clock: FrozenClock) -> Iterator[Client]:
    """The console with a token, not logged in."""
    client = Client(create_app(celery_app, token=TOKEN, clock=clock))
    yield client
    client.close()


@pytest.fixture
def read_only(celery_app: Celery, clock: FrozenClock) -> Iterator[Client]:
    """The console without a token: read-only."""
    client = Client(create_app(celery_app, token="", clock=clock))
    yield client
    client.close()


def log_in(client: Client) -> str:
    """Log ``client`` in; the CSRF token its forms carry."""
    response = client.post("/login", data={"token": TOKEN})
    assert response.status_code == 303, response.text
    return csrf_of(client.get("/schedules").text)


def csrf_of(page: str) -> str:
    found = re.search(r'name="csrf" value="([0-9a-f]+)"', page)
    assert found is not None, "no CSRF field on the page"
    return found.group(1)


def bearer(token: str = TOKEN) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def insert_fire(app: Celery, name: str, nominal_at: datetime, **values: Any) -> None:
    database = database_for(app)
    row = {
        "schedule": name,
        "nominal_at": nominal_at,
        "key": f"{name}@{nominal_at:%Y-%m-%dT%H:%M:%SZ}",
        "task_id": f"task-{name}-{nominal_at:%H%M}",
        "kind": "scheduled",
        "state": "sent",
        "publish_after": nominal_at,
        "publish_count": 1,
        "created_at": nominal_at,
        "sent_at": nominal_at,
        **values,
    }
    with database.begin() as conn:
        conn.execute(insert(table_of(database.models.Fire)), [row])


def insert_run(app: Celery, name: str | None, nominal_at: datetime, **values: Any) -> None:
    database = database_for(app)
    row = {
        "task_id": f"task-{name}-{nominal_at:%H%M}",
        "task_name": "t.noop",
        "schedule": name,
        "nominal_at": nominal_at,
        "key": None if name is None else f"{name}@{nominal_at:%Y-%m-%dT%H:%M:%SZ}",
        "attempt": 1,
        "state": "succeeded",
        "started_at": nominal_at,
        "finished_at": nominal_at,
        "duration": 1.5,
        "updated_at": nominal_at,
        **values,
    }
    with database.begin() as conn:
        conn.execute(insert(table_of(database.models.JobRun)), [row])


def tick_beat(app: Celery, now: datetime) -> None:
    """Register a Beat that ticked at ``now`` (the console then deems Beat running)."""
    database = database_for(app)
    with database.begin() as conn:
        beats.heartbeat(
            conn, database.models, name="test:1", host="test", pid=1, started_at=now, now=now
        )
