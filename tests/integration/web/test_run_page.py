"""A run's own page and API answer, on real SQLite and PostgreSQL: a failed run recorded
as a worker records it (Celery's tracer, the installed recorder) shows its arguments and
its traceback, bounded; the runs table links to it."""

from __future__ import annotations

import html
import time
from datetime import datetime, timezone
from typing import Any

from celery import Celery
from celery.app.trace import build_tracer
from sqlalchemy import select

import celery_gaffer
from celery_gaffer import GafferTask, ScheduleStore, every
from celery_gaffer.runs import endings
from celery_gaffer.runs.details import TRACEBACK_LIMIT
from celery_gaffer.settings import forget_settings
from celery_gaffer.store import database_for
from celery_gaffer.web.app import create_app

from ...support import FrozenClock
from .conftest import SCRIPT_NAME, TOKEN, Client, insert_run


def failed_run(app: Celery, args: Any, kwargs: Any, message: str = "the ledger is closed") -> int:
    """The id of the run record of a delivery of a task that fails with ``message``."""
    celery_gaffer.install(app)

    @app.task(base=GafferTask, shared=False, name="t.settle")
    def settle(*args: Any, **kwargs: Any) -> None:
        raise LookupError(message)

    task_id = f"settle-{time.monotonic_ns()}"
    tracer = build_tracer(settle.name, settle, app=app, eager=False)
    tracer(task_id, args, kwargs, {"id": task_id, "delivery_info": {}})
    endings.end_writer().write_in_order(lambda: None)  # its end record is written
    database = database_for(app)
    runs = database.models.JobRun
    with database.read() as conn:
        return int(conn.execute(select(runs.id).where(runs.task_id == task_id)).scalar_one())


def test_api_run_has_the_runs_fields_its_arguments_error_and_traceback(
    celery_app: Celery, client: Client
) -> None:
    run_id = failed_run(celery_app, (7, "eu"), {"dry": False})
    listed = {run["id"]: run for run in client.get("/api/runs").json()}
    response = client.get(f"/api/runs/{run_id}")
    assert response.status_code == 200
    body = response.json()
    assert {key: body[key] for key in listed[run_id]} == listed[run_id]
    assert body["state"] == "failed"
    assert body["args"] == [7, "eu"]
    assert body["kwargs"] == {"dry": False}
    assert body["error"] == "LookupError: the ledger is closed"
    assert (body["error_type"], body["error_message"]) == ("LookupError", "the ledger is closed")
    assert "in settle" in body["traceback"]
    assert body["traceback"].rstrip().endswith("LookupError: the ledger is closed")


def test_api_run_refuses_a_bad_id_and_does_not_find_an_unknown_one(client: Client) -> None:
    for bad in ("abc", "-1", "1.5", "١٢"):
        response = client.get(f"/api/runs/{bad}")
        assert response.status_code == 400, bad
        assert response.json()["error"].startswith("id: expected a whole number")
    for unknown in ("424242", "99999999999999999999"):
        response = client.get(f"/api/runs/{unknown}")
        assert response.status_code == 404
        assert "error" in response.json()


def test_run_page_shows_the_record_its_arguments_and_its_bounded_traceback(
    celery_app: Celery, client: Client
) -> None:
    long_message = "no account " + "z" * 30_000
    run_id = failed_run(celery_app, ([SCRIPT_NAME],), {"region": "eu"}, long_message)
    response = client.get(f"/runs/{run_id}")
    assert response.status_code == 200
    page = response.text
    assert SCRIPT_NAME not in page  # escaped
    assert html.escape(SCRIPT_NAME, quote=True) in page or "&lt;script&gt;" in page
    assert 'id="run-state">failed<' in page
    assert "<code>t.settle</code>" in page
    assert '<pre class="run-text" id="run-args">' in page
    assert "&#34;region&#34;: &#34;eu&#34;" in page or "&quot;region&quot;: &quot;eu&quot;" in page
    start = page.index('id="run-traceback">') + len('id="run-traceback">')
    shown = html.unescape(page[start : page.index("</pre>", start)])
    assert len(shown) <= TRACEBACK_LIMIT
    assert shown.startswith("… ")
    assert shown.rstrip().endswith("z" * 100)
    assert "LookupError: no account" not in shown[:200]  # the start was cut, the end kept


def test_run_page_of_a_scheduled_run_links_its_schedule_and_the_runs_table_links_it(
    celery_app: Celery, client: Client, store: ScheduleStore, clock: FrozenClock
) -> None:
    store.add("hourly-sync", "t.noop", every(3600))
    insert_run(
        celery_app, "hourly-sync", clock.now, worker="w1@host", fence=12, lease="hourly-sync"
    )
    (row,) = client.get("/api/runs").json()
    table = client.get("/runs").text
    assert f'<a href="/runs/{row["id"]}">{row["id"]}</a>' in table
    page = client.get(f"/runs/{row['id']}").text
    assert 'href="/schedules/hourly-sync" class="name">hourly-<wbr>sync<' in page
    assert "w1@host" in page
    assert 'id="run-fence">12<' in page
    assert 'id="run-args">not recorded<' in page
    assert 'id="run-traceback"' not in page
    assert client.get("/runs/nope").status_code == 400
    assert client.get("/runs/424242").status_code == 404


def test_a_runs_trace_id_is_shown_and_linked_where_gaffer_trace_url_says(
    celery_app: Celery, clock: FrozenClock
) -> None:
    trace_id = "4bf92f3577b34da6a3ce929d0e0e4736"
    nominal = datetime(2026, 3, 1, 9, 0, tzinfo=timezone.utc)
    insert_run(celery_app, None, nominal, task_id="traced", trace_id=trace_id)
    insert_run(celery_app, None, nominal, task_id="untraced")
    database = database_for(celery_app)
    runs = database.models.JobRun
    with database.read() as conn:
        ids = dict(conn.execute(select(runs.task_id, runs.id)).all())  # type: ignore[arg-type]
    plain = Client(create_app(celery_app, token=TOKEN, clock=clock))
    try:
        assert plain.get(f"/api/runs/{ids['traced']}").json()["trace_id"] == trace_id
        assert plain.get(f"/api/runs/{ids['untraced']}").json()["trace_id"] is None
        page = plain.get(f"/runs/{ids['traced']}").text
        assert f"<code>{trace_id}</code>" in page
        assert "jaeger" not in page
    finally:
        plain.close()
    celery_app.conf.gaffer_trace_url = "https://jaeger.example/trace/{trace_id}?x=1&y=2"
    forget_settings(celery_app)
    linked = Client(create_app(celery_app, token=TOKEN, clock=clock))
    try:
        page = linked.get(f"/runs/{ids['traced']}").text
        href = html.escape(f"https://jaeger.example/trace/{trace_id}?x=1&y=2")
        assert f'<a href="{href}"><code>{trace_id}</code></a>' in page
        assert '<dd id="run-trace">-</dd>' in linked.get(f"/runs/{ids['untraced']}").text
    finally:
        linked.close()
