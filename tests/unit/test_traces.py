"""The trace helpers (celery_gaffer.traces): a fire's span and its headers, the run's span
as its child, and nothing at all without OpenTelemetry or without an SDK."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from celery_gaffer.exceptions import ConfigurationError
from celery_gaffer.traces import (
    end_fire,
    end_run,
    fire_span,
    start_run,
    trace_link,
    trace_url_setting,
)

ROOT = Path(__file__).resolve().parents[2]
KEY = "nightly@2026-03-01T09:00:00Z"


@pytest.fixture
def exported() -> InMemorySpanExporter:
    return InMemorySpanExporter()


@pytest.fixture
def tracer(exported: InMemorySpanExporter) -> Any:
    """An SDK tracer of a provider of the test's own (the global one is left alone)."""
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exported))
    return provider.get_tracer("test")


def _fire(tracer: Any, headers: dict[str, Any], jitter: float | None = 30.0) -> Any:
    return fire_span(
        tracer,
        "nightly",
        "2026-03-01T09:00:00Z",
        KEY,
        headers,
        nominal_ts=0.0,
        jitter=jitter,
        catchup="latest",
        kind="scheduled",
        publish_count=1,
    )


def test_a_fire_span_puts_its_context_in_the_headers(
    tracer: Any, exported: InMemorySpanExporter
) -> None:
    headers: dict[str, Any] = {"gaffer_key": KEY}
    span = _fire(tracer, headers)
    end_fire(span, None)
    [done] = exported.get_finished_spans()
    context = done.get_span_context()
    assert headers["traceparent"].startswith(f"00-{context.trace_id:032x}-{context.span_id:016x}-")
    assert done.name == "gaffer.fire nightly"
    assert done.kind is trace.SpanKind.PRODUCER
    attributes = dict(done.attributes or {})
    assert attributes["gaffer.key"] == KEY
    assert attributes["gaffer.catchup"] == "latest"
    assert 0.0 <= attributes["gaffer.jitter"] < 30.0
    assert attributes["gaffer.late"] > 0  # its nominal time is the epoch
    assert done.status.is_ok


def test_a_fire_not_sent_ends_its_span_with_an_error(
    tracer: Any, exported: InMemorySpanExporter
) -> None:
    end_fire(_fire(tracer, {}, jitter=None), "")
    [done] = exported.get_finished_spans()
    assert done.status.status_code is trace.StatusCode.ERROR
    assert "gaffer.jitter" not in (done.attributes or {})


def test_without_an_sdk_a_fire_adds_no_header() -> None:
    headers: dict[str, Any] = {"gaffer_key": KEY}
    assert _fire(trace.NoOpTracer(), headers) is None
    assert headers == {"gaffer_key": KEY}


def test_the_run_span_is_the_child_of_the_fire_in_the_request_headers(
    tracer: Any, exported: InMemorySpanExporter
) -> None:
    headers: dict[str, Any] = {}
    end_fire(_fire(tracer, headers), None)
    request = SimpleNamespace(traceparent=headers["traceparent"], timelimit=(None, None))
    run = start_run(tracer, "t.nightly", request, {"gaffer.key": KEY})
    assert run.owned
    assert trace.get_current_span() is run.span  # the task's own spans are its children
    end_run(run, {"gaffer.outcome": "duplicate", "gaffer.fence": None}, failed=False)
    assert not trace.get_current_span().get_span_context().is_valid
    fire, ran = exported.get_finished_spans()
    assert ran.parent is not None
    assert ran.parent.span_id == fire.get_span_context().span_id
    assert run.trace_id == f"{fire.get_span_context().trace_id:032x}"
    assert ran.kind is trace.SpanKind.CONSUMER
    assert dict(ran.attributes or {}) == {"gaffer.key": KEY, "gaffer.outcome": "duplicate"}


def test_a_run_without_a_fire_starts_a_trace_and_without_an_sdk_none(
    tracer: Any, exported: InMemorySpanExporter
) -> None:
    run = start_run(tracer, "t.adhoc", SimpleNamespace(), {})
    end_run(run, {"gaffer.outcome": "failed"}, failed=True)
    [ran] = exported.get_finished_spans()
    assert ran.parent is None
    assert ran.status.status_code is trace.StatusCode.ERROR
    untraced = start_run(trace.NoOpTracer(), "t.adhoc", SimpleNamespace(), {})
    assert (untraced.span, untraced.trace_id, untraced.owned) == (None, None, False)


def test_the_trace_url_setting_and_its_links() -> None:
    url = "https://jaeger.example/trace/{trace_id}"
    assert trace_url_setting(None) is None
    assert trace_url_setting(f" {url} ") == url
    for bad in ("https://jaeger.example/trace/", "ftp://x/{trace_id}", "{trace_id}", 7):
        with pytest.raises(ConfigurationError, match="gaffer_trace_url: expected an http"):
            trace_url_setting(bad)
    assert trace_link(url, "ab" * 16) == "https://jaeger.example/trace/" + "ab" * 16
    assert trace_link(url, None) is None
    assert trace_link(None, "ab" * 16) is None


def test_without_opentelemetry_nothing_is_imported_or_traced() -> None:
    probe = (
        "import sys\n"
        "sys.modules['opentelemetry'] = None\n"
        "from celery_gaffer import traces\n"
        "import celery_gaffer.beat.publisher, celery_gaffer.runs.recorder\n"
        "assert traces.tracer() is None and traces.tracer() is None\n"
        "print('ok')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert done.stdout.strip() == "ok", done.stderr
    lazy = "import sys, celery_gaffer.beat.publisher, celery_gaffer.runs.recorder\n"
    lazy += "print(sorted(m for m in sys.modules if m.startswith('opentelemetry')))"
    imported = subprocess.run(
        [sys.executable, "-c", lazy], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert imported.stdout.strip() == "[]"


def test_an_instrumentation_span_ended_before_gaffer_ends_the_run_is_said_once(
    tracer: Any, exported: InMemorySpanExporter, caplog: pytest.LogCaptureFixture
) -> None:
    """Instrumented after install() the other way round, its receiver ends its span
    first: the outcome cannot be set, and the log says so (once), naming the fix."""
    from celery_gaffer.runtime import runtime
    from celery_gaffer.traces import RunTrace

    runtime().part("traces_warned", set).discard("ended")
    ended = tracer.start_span("run/t.settle")
    ended.end()
    trace_id = f"{ended.get_span_context().trace_id:032x}"
    caplog.set_level("WARNING", logger="celery_gaffer.traces")
    for _ in range(2):
        end_run(RunTrace(ended, False, None, trace_id), {"gaffer.outcome": "succeeded"}, False)
    lines = [r.getMessage() for r in caplog.records if r.name == "celery_gaffer.traces"]
    assert len(lines) == 1
    assert "after celery_gaffer.install(app)" in lines[0]
    assert "gaffer.outcome" not in exported.get_finished_spans()[0].attributes
