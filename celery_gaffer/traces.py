"""OpenTelemetry traces from a fire to its run (the ``[otel]`` extra).

Beat makes one ``gaffer.fire <schedule>`` span (kind PRODUCER) for each fire it sends and
puts its context in the message headers (the global propagator: W3C ``traceparent`` by
default); the worker's ``gaffer.run <task>`` span (CONSUMER) is its child. When
``opentelemetry-instrumentation-celery`` has instrumented the worker, its run span is the
run's span: Gaffer only adds its attributes to it.

OpenTelemetry is imported on first use, and only when it is installed: without
``opentelemetry-api``, :func:`tracer` is None (found out once) and nothing else runs.
With the API but no SDK configured by the app, every span is the API's no-op one: no
header is added and no attribute set. Only public OpenTelemetry APIs are used.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from .exceptions import ConfigurationError
from .runtime import runtime

__all__ = [
    "TRACE_URL_KEY",
    "RunTrace",
    "end_fire",
    "end_run",
    "extract_context",
    "fire_span",
    "start_run",
    "trace_id_of",
    "trace_link",
    "trace_url_setting",
    "tracer",
]

logger = logging.getLogger("celery_gaffer.traces")

#: The setting of the console's link to a trace.
TRACE_URL_KEY = "gaffer_trace_url"

#: The tracer's name (the instrumentation scope of Gaffer's spans).
SCOPE = "celery_gaffer"


class Telemetry:
    """What this process found of OpenTelemetry, once (a part of the runtime)."""

    def __init__(self) -> None:
        try:
            from opentelemetry import trace
        except ImportError:
            #: Gaffer's tracer; None: OpenTelemetry is not installed.
            self.tracer: Any | None = None
        else:
            self.tracer = trace.get_tracer(SCOPE)
        try:
            from opentelemetry.instrumentation.celery import CeleryInstrumentor
        except ImportError:
            #: opentelemetry-instrumentation-celery's instrumentor (a singleton), if installed.
            self.instrumentor: Any | None = None
        else:
            self.instrumentor = CeleryInstrumentor()  # type: ignore[no-untyped-call]


def tracer() -> Any | None:
    """Gaffer's tracer, or None when ``opentelemetry-api`` is not installed.

    The API's tracer follows the provider the app sets, even one set later."""
    return runtime().part("telemetry", Telemetry).tracer


def _instrumented() -> bool:
    """Whether opentelemetry-instrumentation-celery instruments Celery in this process."""
    instrumentor = runtime().part("telemetry", Telemetry).instrumentor
    return instrumentor is not None and bool(instrumentor.is_instrumented_by_opentelemetry)


def trace_id_of(span: Any) -> str | None:
    """The 32 hex digits of a span's trace id (None: not a valid span)."""
    context = span.get_span_context()
    if not context.is_valid:
        return None
    return f"{context.trace_id:032x}"


def trace_url_setting(value: Any) -> str | None:
    """``gaffer_trace_url``: an http(s) URL with ``{trace_id}`` in it, or None."""
    if value is None:
        return None
    text = value.strip() if isinstance(value, str) else ""
    try:
        parts = urlsplit(text)
    except ValueError:
        parts = urlsplit("")
    if parts.scheme not in ("http", "https") or not parts.netloc or "{trace_id}" not in text:
        raise ConfigurationError(
            f"{TRACE_URL_KEY}: expected an http(s) URL with {{trace_id}} in it, got {value!r}",
            field=TRACE_URL_KEY,
        )
    return text


def trace_link(url: str | None, trace_id: str | None) -> str | None:
    """The link to a trace (None: no URL set, or no trace)."""
    if url is None or not trace_id:
        return None
    return url.replace("{trace_id}", trace_id)


# Beat: one span per fire sent.


def fire_span(
    tracer: Any,
    schedule: str,
    nominal_at: str,
    key: str,
    headers: dict[str, Any],
    *,
    nominal_ts: float,
    jitter: float | None,
    catchup: str | None,
    kind: str,
    publish_count: int,
) -> Any | None:
    """Start the span of a fire about to be sent, and put its context in ``headers``.

    None, with ``headers`` untouched, when the span is the API's no-op one (no SDK). The
    caller sends the message inside :func:`sending` and then calls :func:`end_fire`."""
    from opentelemetry import propagate, trace

    span = tracer.start_span(f"gaffer.fire {schedule}", kind=trace.SpanKind.PRODUCER)
    if not span.get_span_context().is_valid:
        return None
    if span.is_recording():
        delay = jitter_delay_of(key, jitter)
        attributes: dict[str, Any] = {
            "gaffer.schedule": schedule,
            "gaffer.nominal_at": nominal_at,
            "gaffer.key": key,
            "gaffer.kind": kind,
            # Seconds after its nominal time plus jitter that the fire is sent: a
            # catch-up fire (or one sent again) is late.
            "gaffer.late": round(max(time.time() - nominal_ts - (delay or 0.0), 0.0), 3),
            "gaffer.publish_count": publish_count,
        }
        if delay is not None:
            attributes["gaffer.jitter"] = delay
        if catchup is not None:
            attributes["gaffer.catchup"] = catchup
        span.set_attributes(attributes)
    propagate.inject(headers, context=trace.set_span_in_context(span))
    return span


def jitter_delay_of(key: str, jitter: float | None) -> float | None:
    """The jitter delay of the fire ``key`` of a schedule with ``jitter`` seconds."""
    if jitter is None:
        return None
    from .protocol import jitter_delay

    return round(jitter_delay(key, jitter), 6)


class sending:
    """While inside, ``span`` is the current span (Celery's own instrumentation, if any,
    makes its publish span a child of it)."""

    __slots__ = ("span", "token")

    def __init__(self, span: Any) -> None:
        self.span = span
        self.token: Any = None

    def __enter__(self) -> None:
        from opentelemetry import context, trace

        self.token = context.attach(trace.set_span_in_context(self.span))

    def __exit__(self, *_: Any) -> None:
        from opentelemetry import context

        context.detach(self.token)


def end_fire(span: Any, problem: str | None) -> None:
    """End a fire's span: an error status when it was not sent (``problem``: why, or ""
    after a broker error)."""
    if problem is not None and span.is_recording():
        from opentelemetry.trace import Status, StatusCode

        span.set_status(Status(StatusCode.ERROR, problem or "broker error: not sent"))
    span.end()


# Worker: the run's span.


@dataclass(slots=True)
class RunTrace:
    """The trace of one run: its span (None: the instrumentation's, found at its end),
    whether Gaffer made it (and ends it), the context token to detach, its trace id."""

    span: Any
    owned: bool
    token: Any
    trace_id: str | None


class Warned(set[str]):
    """The warnings of this module already logged in this process."""


def _warn_ended_before_gaffer() -> None:
    """The instrumentation's run span ended before Gaffer's postrun receiver ran: its
    receivers were connected first, and the run's outcome cannot be set on it. Said once."""
    warned = runtime().part("traces_warned", Warned)
    if "ended" in warned:
        return
    warned.add("ended")
    logger.warning(
        "the run span of opentelemetry-instrumentation-celery ended before celery-gaffer "
        "could set its outcome: call CeleryInstrumentor().instrument() after "
        "celery_gaffer.install(app)",
        extra={"action": "trace_outcome_lost"},
    )


def extract_context(request: Any) -> Any:
    """The context a Celery request's headers carry (the fire's span's)."""
    from opentelemetry import propagate

    carrier = {}
    for name in propagate.get_global_textmap().fields:
        value = getattr(request, name, None)
        if isinstance(value, str):
            carrier[name] = value
    return propagate.extract(carrier) if carrier else None


def start_run(tracer: Any, task_name: str, request: Any, attributes: dict[str, Any]) -> RunTrace:
    """Start the span of a run (or find the instrumentation's) as a child of the fire's
    context in the request's headers; set ``attributes`` on it."""
    from opentelemetry import context, trace

    parent = extract_context(request)
    if _instrumented():
        # Its run span: already current if its receiver ran first, else made after this.
        current = trace.get_current_span()
        span = current if current.is_recording() else None
        trace_id = trace_id_of(current) or (
            None if parent is None else trace_id_of(trace.get_current_span(parent))
        )
        if span is not None:
            span.set_attributes(attributes)
        return RunTrace(span, False, None, trace_id)
    span = tracer.start_span(
        f"gaffer.run {task_name}", context=parent, kind=trace.SpanKind.CONSUMER
    )
    trace_id = trace_id_of(span)
    if trace_id is None:  # the no-op span: no SDK
        return RunTrace(None, False, None, None)
    if span.is_recording():
        span.set_attributes(attributes)
    token = context.attach(trace.set_span_in_context(span, parent))
    return RunTrace(span, True, token, trace_id)


def end_run(run: RunTrace, attributes: dict[str, Any], failed: bool) -> None:
    """Set the run's outcome ``attributes`` on its span, and end it if Gaffer made it."""
    from opentelemetry import context, trace

    span = run.span
    if span is None:
        # The instrumentation's run span, current until its own receiver ends it.
        span = trace.get_current_span()
    if span.is_recording():
        span.set_attributes({k: v for k, v in attributes.items() if v is not None})
        if failed:
            span.set_status(trace.Status(trace.StatusCode.ERROR, str(attributes["gaffer.outcome"])))
    elif not run.owned and run.trace_id is not None:
        _warn_ended_before_gaffer()
    if run.owned:
        span.end()
        context.detach(run.token)
