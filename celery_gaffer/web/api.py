"""The console's JSON API under ``/api/``: the pages' data and actions.

Reads are open like the pages (unless a token that may only read is configured: then
they need a token too, see :mod:`.security`). Writes need ``Authorization: Bearer
<token>`` of a token that may act (401 without one, 403 for a token that may only read
or on a read-only console), and are recorded under that token's name. Errors are
``{"error": "..."}``: 400 for bad input (the GafferError's message, naming the field),
404 for an unknown schedule.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from ..exceptions import InvalidInput
from ..protocol import RunState, loads_json
from ..schedules.explain import Explanation
from . import actions
from .console import PAGE_SIZE
from .lists import COUNT_CAP, Listing, read_filter, read_sort, read_whole
from .pages import console_of, shown_runs
from .present import fire_json, iso, run_json, schedule_json
from .schedule_page import UpcomingFire
from .security import READ_ONLY
from .tokens import Token

#: Most schedules one API page returns.
MAX_LIMIT = 500


def error(status: int, text: str) -> JSONResponse:
    return JSONResponse({"error": " ".join(text.split())}, status)


def schedules(request: Request) -> Response:
    """GET ``/api/schedules``: the filters of the schedules page (``state``, ``task``,
    ``zone``, ``source``, ``q``), ``sort``, ``after``/``before`` cursors and ``limit``;
    ``Link`` headers name the next and previous pages, ``X-Total-Count`` the total (or
    ``more than N``; absent for a zone filter)."""
    params = request.query_params
    where, sort = read_filter(params), read_sort(params)
    limit = read_whole(params, "limit", most=MAX_LIMIT) or PAGE_SIZE
    after, before = params.get("after") or None, params.get("before") or None
    page = console_of(request).page(where=where, sort=sort, after=after, before=before, limit=limit)
    body = [schedule_json(v.stored, v.state, v.reason, v.last_run) for v in page.schedules]
    listing = Listing("/api/schedules", {**where.as_query(), "limit": str(limit)}, sort, "name")
    links = []
    if page.next_after is not None:
        links.append(f'<{listing.url(after=page.next_after)}>; rel="next"')
    if page.previous_before is not None:
        links.append(f'<{listing.url(before=page.previous_before)}>; rel="prev"')
    headers = {"link": ", ".join(links)} if links else {}
    span = page.span
    if span.counted:
        headers["x-total-count"] = (
            str(span.total) if span.total is not None else f"more than {COUNT_CAP}"
        )
    return JSONResponse(body, headers=headers)


def schedule(request: Request) -> Response:
    name = request.path_params["name"]
    found = console_of(request).detail(name)
    if found is None:
        return error(404, f"name: no schedule named {name!r}")
    view = found.view
    body = schedule_json(view.stored, view.state, view.reason, None)
    body["next_fires"] = _next_fires(found.explanation, found.upcoming)
    # The reasons alone, as ``explain --json`` and ``schedules --json`` list them.
    body["calendar"] = [fire.reason for fire in found.upcoming if fire.reason is not None]
    body["clock_changes"] = [
        {"at": iso(change.at), "rule": str(change.rule), "effect": change.effect}
        for change in (found.explanation.transitions if found.explanation else ())
    ]
    body["fires"] = [fire_json(fire) for fire in found.fires]
    body["runs"] = [run_json(run) for run in found.runs]
    return JSONResponse(body)


def _next_fires(
    explanation: Explanation | None, upcoming: Sequence[UpcomingFire]
) -> list[dict[str, Any]]:
    """The listed fires; ``reason``: why the calendar skips or moves one (else null)."""
    if explanation is None:
        return []
    reasons = {fire.utc: fire.reason for fire in upcoming}
    return [
        {
            "at": iso(fire.utc),
            "local": fire.local.isoformat(),
            "zone": fire.abbreviation,
            "reason": reasons.get(fire.utc),
        }
        for fire in explanation.fires
    ]


def runs(request: Request) -> Response:
    state = request.query_params.get("state") or None
    if state is not None and state not in {str(s) for s in RunState}:
        raise InvalidInput(f"state: expected one of {', '.join(RunState)}", field="state")
    schedule_name = request.query_params.get("schedule") or None
    rows = console_of(request).runs(state=state, schedule=schedule_name)
    return JSONResponse([run_json(row) for row in shown_runs(rows)])


def alerts(request: Request) -> Response:
    found, more = console_of(request).alerts()
    body = [
        {
            "schedule": view.name,
            "state": view.state,
            "reason": view.reason,
            "next_fire_at": iso(view.stored.next_fire_at),
            "error": view.stored.error,
        }
        for view in found
    ]
    headers = {"x-more-alerts": "true"} if more else {}
    return JSONResponse(body, headers=headers)


async def act(request: Request) -> Response:
    """POST ``/api/schedules/{name}/pause|resume|trigger|backfill`` (JSON body: ``note``
    and ``until`` for a pause, both optional; ``from``, ``to`` for a backfill;
    ``dry_run`` for resume and backfill: the preview only)."""
    action = request.path_params["action"]
    if action not in ("pause", "resume", "trigger", "backfill"):
        return error(404, f"action: no action {action!r}")
    return await _write(request, action)


async def edit(request: Request) -> Response:
    """PATCH ``/api/schedules/{name}``: the fields to change (``dry_run``: the preview)."""
    return await _write(request, "edit")


def writer(request: Request) -> Token | Response:
    """The token an API write is made with, or the refusal to answer: 403 on a
    read-only console or for a token that may only read, 401 without a valid one."""
    guard = console_of(request).guard
    if guard.read_only:
        return error(403, READ_ONLY)
    caller = guard.bearer(request)
    if caller is None:
        return error(401, "this action needs the header Authorization: Bearer <token>")
    if caller.read_only:
        return error(403, f"the token {caller.name!r} may only read")
    return caller


async def _write(request: Request, action: str) -> Response:
    caller = writer(request)
    if isinstance(caller, Response):
        return caller
    given = await _body(request)
    dry_run = given.pop("dry_run", False)
    if not isinstance(dry_run, bool):
        raise InvalidInput("dry_run: expected true or false", field="dry_run")
    return await run_in_threadpool(_do, request, action, given, dry_run)


def _do(request: Request, action: str, given: dict[str, Any], dry_run: bool) -> Response:
    console = console_of(request)
    store = actions.store_for(console.store, console.guard.bearer(request), "api")
    name = request.path_params["name"]
    if dry_run:
        if action not in actions.PREVIEWED:
            raise InvalidInput(f"dry_run: {action} has no preview", field="dry_run")
        found = actions.preview(store, name, action, given, from_form=False)
        return JSONResponse({"dry_run": True, "preview": actions.preview_json(found)})
    outcome = actions.apply(store, name, action, given, from_form=False, now=console.clock())
    return JSONResponse({"done": action, "message": outcome.message, **outcome.facts})


async def _body(request: Request) -> dict[str, Any]:
    raw = await request.body()
    if not raw.strip():
        return {}
    body = loads_json(raw, "body")
    if not isinstance(body, dict):
        raise InvalidInput("body: expected a JSON object", field="body")
    return body
