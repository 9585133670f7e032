"""Traces from a fire to its run: a real ``celery beat -S gaffer``, a real worker, Redis and
PostgreSQL, and the project's own OpenTelemetry SDK writing each ended span to a file."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from celery import Celery
from sqlalchemy import select

from celery_gaffer import ScheduleStore, every
from celery_gaffer.store import database_for

from ..processes import CeleryProcess, celery_processes
from ..support import message_headers

PROJECT = """
import json
import sys

MODE = {mode!r}
if MODE == "absent":  # as if the [otel] extra were not installed
    sys.modules["opentelemetry"] = None

from celery import Celery

import celery_gaffer
from celery_gaffer import GafferTask

app = Celery("tproj", broker={broker!r})
app.conf.gaffer_database_url = {database!r}
app.conf.broker_connection_retry_on_startup = True
app.conf.worker_prefetch_multiplier = 1
celery_gaffer.install(app)

if MODE in ("sdk", "instrumented"):
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

    class FileExporter(SpanExporter):
        def export(self, spans):
            with open({spans!r}, "a") as out:
                for span in spans:
                    out.write(json.dumps({{
                        "name": span.name,
                        "kind": span.kind.name,
                        "trace_id": format(span.context.trace_id, "032x"),
                        "span_id": format(span.context.span_id, "016x"),
                        "parent_id": span.parent and format(span.parent.span_id, "016x"),
                        "attributes": dict(span.attributes or {{}}),
                    }}) + "\\n")
            return SpanExportResult.SUCCESS

    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(FileExporter()))
    trace.set_tracer_provider(provider)

if MODE == "instrumented":
    from opentelemetry.instrumentation.celery import CeleryInstrumentor

    CeleryInstrumentor().instrument()


@app.task(base=GafferTask, bind=True, name="tproj.once")
def once(self):
    with self.session():  # completes the fire's key: a second delivery is a duplicate
        pass
    return "done"
"""


def write(tmp_path: Path, mode: str, redis_url: str, postgres_url: str) -> Path:
    spans = tmp_path / "spans.jsonl"
    (tmp_path / "tproj.py").write_text(
        PROJECT.format(mode=mode, broker=redis_url, database=postgres_url, spans=str(spans))
    )
    return spans


def client(redis_url: str, postgres_url: str) -> Celery:
    app = Celery("tproj", broker=redis_url, set_as_current=False)
    app.conf.gaffer_database_url = postgres_url
    app.task(name="tproj.once", shared=False)(_stub)
    return app


def _stub() -> None:
    return None


def wait_until(predicate: Callable[[], Any], what: str, timeout: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def runs(app: Celery) -> list[dict[str, Any]]:
    database = database_for(app)
    table = database.models.JobRun.__table__  # type: ignore[attr-defined]
    with database.read() as conn:
        query = select(table).where(table.c.schedule == "traced").order_by(table.c.id)
        return [dict(row) for row in conn.execute(query).mappings()]


def beat(tmp_path: Path) -> CeleryProcess:
    args = ["beat", "-S", "gaffer", "--loglevel=INFO", "-s", str(tmp_path / "beat-state")]
    return CeleryProcess(tmp_path, "tproj", args, "beat")


def worker(tmp_path: Path) -> CeleryProcess:
    return CeleryProcess(tmp_path, "tproj", ["worker", "--pool=solo", "--loglevel=INFO"], "worker")


def ended(app: Celery) -> list[dict[str, Any]]:
    return [r for r in runs(app) if r["state"] != "running"]


def run_fires(tmp_path: Path, app: Celery, spans_file: Path) -> list[dict[str, Any]]:
    """Beat and a worker until 3 fires of ``traced`` have run, then the first fire's
    message delivered again; the run records and the spans."""
    ScheduleStore(app).add("traced", "tproj.once", every(1), gaffer={"catchup": "all"})
    with celery_processes() as procs:
        procs.append(worker(tmp_path))
        procs[0].wait_for_log("ready.")
        procs.append(beat(tmp_path))
        wait_until(lambda: len(ended(app)) >= 3, "3 runs")
        procs[1].stop()
        first = ended(app)[0]
        fire = next(
            span
            for span in spans(spans_file)
            if span["trace_id"] == first["trace_id"] and span["name"].startswith("gaffer.fire")
        )
        # The same message again, as a broker redelivers it: same task id, same headers.
        headers = {
            "gaffer_schedule": "traced",
            "gaffer_nominal_at": first["key"].split("@")[1],
            "gaffer_key": first["key"],
            "celery_beat_task": True,
            "traceparent": f"00-{fire['trace_id']}-{fire['span_id']}-01",
        }
        app.send_task("tproj.once", task_id=first["task_id"], headers=headers)
        wait_until(
            lambda: [r for r in ended(app) if r["state"] == "duplicate"], "the duplicate's run"
        )
        procs[0].stop()
    return ended(app)


def spans(spans_file: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in spans_file.read_text().splitlines()]


@pytest.mark.parametrize("mode", ["sdk", "instrumented"])
def test_each_fire_is_one_trace_with_its_run_as_child(
    tmp_path: Path, redis_url: str, postgres_url: str, mode: str
) -> None:
    spans_file = write(tmp_path, mode, redis_url, postgres_url)
    app = client(redis_url, postgres_url)
    records = run_fires(tmp_path, app, spans_file)
    found = spans(spans_file)
    fires = {s["trace_id"]: s for s in found if s["name"] == "gaffer.fire traced"}
    # One trace per fire: each fire span starts a trace of its own.
    assert len(fires) == len([s for s in found if s["name"] == "gaffer.fire traced"]) >= 3
    for fire in fires.values():
        assert fire["kind"] == "PRODUCER"
        assert fire["parent_id"] is None
        attributes = fire["attributes"]
        assert attributes["gaffer.schedule"] == "traced"
        assert attributes["gaffer.key"] == f"traced@{attributes['gaffer.nominal_at']}"
        assert attributes["gaffer.jitter"] == 0.0
        assert attributes["gaffer.catchup"] == "all"
    if mode == "sdk":
        run_spans = [s for s in found if s["name"] == "gaffer.run tproj.once"]
        assert not [s for s in found if s["name"].startswith("run/")]
    else:
        # Celery's instrumentation makes the run span; Gaffer makes none of its own.
        run_spans = [s for s in found if s["name"] == "run/tproj.once"]
        assert not [s for s in found if s["name"].startswith("gaffer.run")]
    assert len(run_spans) == len(records)
    by_id = {s["span_id"]: s for s in found}
    for record in records:
        trace_id = record["trace_id"]
        assert trace_id in fires, record
        [run] = [s for s in run_spans if s["span_id"] in _runs_of(record, run_spans, found)]
        parent = by_id[run["parent_id"]]
        if mode == "instrumented" and record["state"] != "duplicate":
            # Beat's instrumented publish is the child of the fire, the run its child.
            assert parent["name"] == "apply_async/tproj.once"
            parent = by_id[parent["parent_id"]]
        assert parent is fires[trace_id]
        assert run["kind"] == "CONSUMER"
        assert run["attributes"]["gaffer.key"] == record["key"]
        assert run["attributes"]["gaffer.schedule"] == "traced"
        assert run["attributes"].get("gaffer.fence") == record["fence"]
    outcomes = sorted((r["state"], r["trace_id"]) for r in records)
    assert [state for state, _ in outcomes].count("duplicate") == 1
    assert {state for state, _ in outcomes} == {"succeeded", "duplicate"}
    for state, trace_id in outcomes:
        assert state in [
            s["attributes"]["gaffer.outcome"] for s in run_spans if s["trace_id"] == trace_id
        ]


def _runs_of(
    record: dict[str, Any], run_spans: list[dict[str, Any]], found: list[dict[str, Any]]
) -> set[str]:
    """The span ids of the run spans of ``record``: in its trace, with its outcome."""
    return {
        s["span_id"]
        for s in run_spans
        if s["trace_id"] == record["trace_id"]
        and s["attributes"]["gaffer.outcome"] == record["state"]
    }


@pytest.mark.parametrize("mode", ["absent", "unconfigured"])
def test_nothing_is_traced_without_the_extra_or_an_sdk(
    tmp_path: Path, redis_url: str, postgres_url: str, mode: str
) -> None:
    spans_file = write(tmp_path, mode, redis_url, postgres_url)
    app = client(redis_url, postgres_url)
    ScheduleStore(app).add("traced", "tproj.once", every(1))
    with celery_processes() as procs:
        procs.append(beat(tmp_path))
        headers = wait_until(lambda: message_headers(redis_url), "a fire in the queue")
        procs[0].stop()
        assert headers[0]["gaffer_schedule"] == "traced"
        assert not {"traceparent", "tracestate"} & set(headers[0])
        procs.append(worker(tmp_path))
        records = wait_until(
            lambda: [r for r in runs(app) if r["state"] != "running"], "a run record"
        )
    assert [r["trace_id"] for r in records] == [None] * len(records)
    assert not spans_file.exists()
