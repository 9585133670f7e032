"""One run record in full: the page ``/runs/{id}`` and ``GET /api/runs/{id}``.

Everything the record knows: its task, schedule and state, its times, key, fence, lease,
attempt, worker and progress, its trace id (linked when ``gaffer_trace_url`` is set),
the delivery's ``args`` and ``kwargs`` and the failure's
traceback (both kept bounded by the run recorder: :mod:`celery_gaffer.runs.details`).
An id that is not a whole number is refused (400), an unknown one is not found (404).
"""

from __future__ import annotations

import json
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from ..schedules.kinds import schedule_from_dict
from ..store import runs as run_rows
from ..store.schedule_rows import decode_json
from ..traces import trace_link
from .api import error
from .lists import LARGEST_ID, ascii_whole
from .pages import console_of, message, render
from .present import run_detail_json, run_reason, zone_of


def api_run(request: Request) -> Response:
    """``GET /api/runs/{id}``: :func:`~celery_gaffer.web.present.run_detail_json`."""
    text = request.path_params["id"]
    run_id = _run_id(text)
    if run_id is None:
        return error(400, f"id: expected a whole number, got {text!r}")
    row = _row(request, run_id)
    if row is None:
        return error(404, f"id: no run {run_id}")
    return JSONResponse(run_detail_json(row))


def page(request: Request) -> Response:
    """``GET /runs/{id}``: the run's page."""
    text = request.path_params["id"]
    run_id = _run_id(text)
    if run_id is None:
        return message(request, 400, "Refused", f"id: expected a whole number, got {text!r}.")
    row = _row(request, run_id)
    if row is None:
        return message(request, 404, "Not found", f"There is no run {run_id}.")
    return render(
        request,
        "run.html",
        title=f"Run {run_id}",
        section="runs",
        run=row,
        zone=_zone(row),
        reason=run_reason(row),
        args=_pretty(row["args"]),
        kwargs=_pretty(row["kwargs"]),
        trace_url=trace_link(console_of(request).database.settings.trace_url, row["trace_id"]),
    )


def _run_id(text: str) -> int | None:
    return ascii_whole(text)


def _row(request: Request, run_id: int) -> dict[str, Any] | None:
    if run_id > LARGEST_ID:
        return None
    database = console_of(request).database
    with database.read() as conn:
        return run_rows.run_detail(conn, database.models, run_id)


def _zone(row: dict[str, Any]) -> Any:
    """The zone the run's times are shown in: its schedule's, else UTC (None)."""
    definition = row.get("schedule_definition")
    try:
        return zone_of(schedule_from_dict(decode_json(definition))) if definition else None
    except (ValueError, TypeError):
        return None


def _pretty(value: Any) -> str | None:
    """``value`` as indented JSON (None: the record has none)."""
    return None if value is None else json.dumps(value, indent=2, ensure_ascii=False)
