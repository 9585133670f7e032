"""The console's HTML pages: schedules, a schedule's detail, runs, alerts, login, and the
actions' forms (with a confirmation page for resume, backfill and edit).

Pages are rendered on the server by Jinja2 with autoescape on, so every user-written
value (names, arguments, errors) is shown as text. GET never changes anything. Handlers
that read the database are plain functions, which Starlette runs in its thread pool.
"""

from __future__ import annotations

import functools
import json
from datetime import tzinfo
from typing import Any, cast
from urllib.parse import quote, unquote

from jinja2 import Environment, PackageLoader, select_autoescape
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response

from ..exceptions import GafferError, ScheduleNotFound
from ..protocol import RunState
from ..schedules.changes import ScheduleChanges, new_timing
from ..schedules.display import describe, when, zone_of
from ..schedules.kinds import schedule_from_dict
from ..schedules.spec import CATCHUP_POLICIES, OVERLAP_POLICIES
from ..store.console import STATES
from ..store.schedule_rows import decode_json
from . import actions
from .console import Console, Detail
from .lists import (
    SCHEDULE_SOURCES,
    Listing,
    read_filter,
    read_run_cursor,
    read_run_state,
    read_sort,
)
from .markup import ISO_INSTANT, breakable, exact_time, readable_instants, utc_iso
from .present import duration, in_words, run_reason, zone_name
from .security import READ_ONLY, SESSION_COOKIE

FLASH_COOKIE = "gaffer_flash"
#: The edit form's fields: a refused edit shows its error beside one of them, else above.
EDIT_FORM_FIELDS = (
    "cron",
    "every",
    "tz",
    "args",
    "kwargs",
    "catchup",
    "overlap",
    "grace",
    "starting_deadline",
)


@functools.cache
def environment() -> Environment:
    env = Environment(
        loader=PackageLoader("celery_gaffer.web", "templates"),
        autoescape=select_autoescape(default=True, default_for_string=True),
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["path"] = lambda name: quote(str(name), safe="")
    # Not Jinja's tojson: its Markup leaves '"' as is, which ends an attribute.
    env.filters["json"] = lambda value: json.dumps(value, ensure_ascii=False)
    env.filters["breakable"] = breakable
    env.globals.update(
        when=when,
        utc_iso=utc_iso,
        exact_time=exact_time,
        describe=describe,
        in_words=in_words,
        zone_name=zone_name,
        duration=duration,
        seconds=lambda value: "default" if value is None else f"{value:g}s",
        read_only_note=READ_ONLY,
        states=STATES,
        run_states=[str(state) for state in RunState],
        catchup_policies=CATCHUP_POLICIES,
        overlap_policies=OVERLAP_POLICIES,
    )
    return env


def console_of(request: Request) -> Console:
    console: Console = request.app.state.console
    return console


def render(request: Request, template: str, status: int = 200, **context: Any) -> HTMLResponse:
    """``template`` rendered with what every page shows (login state, CSRF, flash)."""
    console = console_of(request)
    guard = console.guard
    flash = unquote(request.cookies.get(FLASH_COOKIE, ""))
    page = (
        environment()
        .get_template(template)
        .render(
            read_only=guard.read_only,
            has_tokens=bool(guard.tokens),
            logged_in=guard.logged_in(request),
            can_act=guard.may_act(request),
            csrf=guard.csrf_token(request),
            flash=flash,
            rendered_at=console.clock(),
            live_url=live_url(request),
            **context,
        )
    )
    response = HTMLResponse(page, status)
    if flash:
        response.delete_cookie(FLASH_COOKIE, path="/", httponly=True, samesite="strict")
    return response


def live_url(request: Request) -> str | None:
    """Where a live page polls: the path and query a GET asked for. None for a page
    that answers a POST (a refused edit at ``/schedules/N/edit``): it does not poll."""
    if request.method != "GET":
        return None
    # As the browser asked for it: the path still percent-encoded (a name holding "%",
    # "?" or "#" polls its own page).
    path = quote(request.scope["path"], safe="/")
    query = request.url.query
    return path + (f"?{query}" if query else "")


def message(request: Request, status: int, title: str, text: str, back: str = "") -> HTMLResponse:
    """A page saying one thing: an error, a refusal."""
    kind = "error" if status >= 400 else "note"
    return render(request, "message.html", status, title=title, message=text, kind=kind, back=back)


def schedules(request: Request) -> Response:
    params = request.query_params
    where, sort = read_filter(params), read_sort(params)
    after, before = params.get("after") or None, params.get("before") or None
    page = console_of(request).page(where=where, sort=sort, after=after, before=before)
    listing = Listing("/schedules", where.as_query(), sort, "name")
    return render(
        request,
        "schedules.html",
        title="Schedules",
        section="schedules",
        page=page,
        where=where,
        listing=listing,
        sources=SCHEDULE_SOURCES,
        next_url=listing.url(after=page.next_after) if page.next_after else None,
        previous_url=listing.url(before=page.previous_before) if page.previous_before else None,
        first_url=listing.url() if (after or before) else None,
    )


def filters(request: Request) -> tuple[str | None, str | None, str | None]:
    """``state``, ``q`` and ``after`` of a schedules query (InvalidInput for a bad state);
    :func:`~.lists.read_filter` reads every filter."""
    where = read_filter(request.query_params)
    return where.state, where.search, request.query_params.get("after") or None


def detail(request: Request) -> Response:
    name = request.path_params["name"]
    found = console_of(request).detail(name)
    if found is None:
        return message(request, 404, "Not found", f"There is no schedule named {name!r}.")
    return _detail_page(request, found)


def _detail_page(
    request: Request,
    found: Detail,
    status: int = 200,
    refused: GafferError | None = None,
    given: dict[str, str] | None = None,
) -> HTMLResponse:
    """The detail page; with ``refused``, the edit form open again with the error beside
    its field and what was typed kept."""
    return render(
        request,
        "detail.html",
        status,
        title=found.view.name,
        section="schedules",
        detail=found,
        runs=shown_runs(found.runs),
        edit_error=None if refused is None else " ".join(str(refused).split()),
        edit_field=None if refused is None else (refused.field or ""),
        edit_given=given or {},
        edit_fields=EDIT_FORM_FIELDS,
    )


def runs(request: Request) -> Response:
    params = request.query_params
    state = read_run_state(params)
    schedule = params.get("schedule") or None
    after = read_run_cursor(params, "after")
    before = read_run_cursor(params, "before")
    page = console_of(request).run_page(state=state, schedule=schedule, after=after, before=before)
    query = {key: value for key, value in (("state", state), ("schedule", schedule)) if value}
    listing = Listing("/runs", query, "newest", "newest")
    return render(
        request,
        "runs.html",
        title="Runs",
        section="runs",
        runs=shown_runs(page.runs),
        page=page,
        state=state or "",
        schedule=schedule or "",
        next_url=listing.url(after=str(page.next_after)) if page.next_after else None,
        previous_url=(
            listing.url(before=str(page.previous_before)) if page.previous_before else None
        ),
        first_url=listing.url() if (after or before) else None,
    )


def shown_runs(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Runs with the zone their times are shown in and their reason."""
    shown = []
    for row in rows:
        try:
            definition = row.get("schedule_definition")
            schedule = schedule_from_dict(decode_json(definition)) if definition else None
        except (ValueError, TypeError):
            schedule = None
        shown.append({**row, "zone": zone_of(schedule), "reason": run_reason(row)})
    return shown


def alerts(request: Request) -> Response:
    found, more = console_of(request).alerts()
    return render(request, "alerts.html", title="Alerts", section="alerts", alerts=found, more=more)


def login_form(request: Request) -> Response:
    return render(request, "login.html", title="Log in", error="")


async def login(request: Request) -> Response:
    guard = console_of(request).guard
    if not guard.tokens:
        return message(request, 403, "Read-only", READ_ONLY)
    form = await request.form()
    given = form.get("token")
    token = guard.token_for(given) if isinstance(given, str) else None
    if token is None:
        return render(request, "login.html", 401, title="Log in", error="That token is wrong.")
    response = RedirectResponse("/schedules", status_code=303)
    response.set_cookie(
        SESSION_COOKIE, guard.session_value(token), httponly=True, samesite="strict", path="/"
    )
    return response


async def logout(request: Request) -> Response:
    """Any valid session logs out (with its CSRF field), one of a token that may only
    read included."""
    refused = await _session_refusal(request)
    if refused is not None:
        return refused
    response = RedirectResponse("/schedules", status_code=303)
    response.delete_cookie(SESSION_COOKIE, path="/", httponly=True, samesite="strict")
    return response


async def act(request: Request) -> Response:
    """POST ``/schedules/{name}/{action}``: apply pause and trigger; show resume, backfill
    and edit's preview first, and apply them when the form comes back with ``confirm=1``."""
    name = request.path_params["name"]
    action = request.path_params["action"]
    if action not in actions.ACTIONS:
        return message(request, 404, "Not found", f"There is no action {action!r}.")
    refused = await _refusal(request)
    if refused is not None:
        return refused
    form = await request.form()
    given = {
        key: value
        for key, value in form.items()
        if key not in ("csrf", "confirm") and isinstance(value, str)
    }
    confirmed = form.get("confirm") == "1"
    # The database work runs in a thread: a slow query never holds up other requests.
    return await run_in_threadpool(_act, request, name, action, given, confirmed)


def _act(
    request: Request, name: str, action: str, given: dict[str, str], confirmed: bool
) -> Response:
    console = console_of(request)
    if action in actions.CONFIRMED and not confirmed:
        stored = console.store.get(name)  # ScheduleNotFound (404) before asking
        return render(
            request,
            "confirm.html",
            title=f"Confirm {action}",
            section="schedules",
            name=name,
            action=action,
            preview=None,
            zone=None,
            source=stored.source,
            fields=sorted(given.items()),
        )
    if action == "edit":
        try:
            return _previewed(request, console, name, action, given, confirmed)
        except GafferError as exc:
            found = console.detail(name)
            if found is None or isinstance(exc, ScheduleNotFound):
                raise
            return _detail_page(request, found, 400, exc, given)
    return _previewed(request, console, name, action, given, confirmed)


def _previewed(
    request: Request,
    console: Console,
    name: str,
    action: str,
    given: dict[str, str],
    confirmed: bool,
) -> Response:
    store = actions.store_for(console.store, console.guard.caller(request), "console")
    if action in actions.PREVIEWED and not confirmed:
        preview = actions.preview(store, name, action, given, from_form=True)
        return render(
            request,
            "confirm.html",
            title=f"Confirm {action}",
            section="schedules",
            name=name,
            action=action,
            preview=preview,
            zone=_zone_after(console, name, action, given),
            fields=sorted(given.items()),
        )
    outcome = actions.apply(store, name, action, given, from_form=True, now=console.clock())
    target = "/schedules" if action == "remove" else f"/schedules/{quote(name, safe='')}"
    response = RedirectResponse(target, status_code=303)
    response.set_cookie(
        FLASH_COOKIE,
        quote(flash_line(console, name, outcome.message)),
        httponly=True,
        samesite="strict",
        path="/",
    )
    return response


def flash_line(console: Console, name: str, text: str) -> str:
    """An action's message as its flash shows it: each ISO instant in it on the schedule's
    clock with UTC in brackets, as the pages write times."""
    if not ISO_INSTANT.search(text):
        return text
    try:
        zone = zone_of(console.store.get(name).schedule)
    except GafferError:  # gone (removed) or unreadable: UTC
        zone = None
    return readable_instants(text, zone)


def _zone_after(console: Console, name: str, action: str, given: dict[str, str]) -> tzinfo | None:
    """The zone a preview's fires are shown in: the schedule's, or the edited one's."""
    current = console.store.get(name).schedule
    if action != "edit":
        return zone_of(current)
    changes = cast(ScheduleChanges, actions.edit_changes(given, from_form=True))
    edited = new_timing(name, current, changes)
    return zone_of(edited or current)


async def _refusal(request: Request) -> Response | None:
    """Why a form post may not act (read-only, not logged in, bad CSRF), or None."""
    if console_of(request).guard.read_only:
        return message(request, 403, "Read-only", READ_ONLY)
    return await _session_refusal(request)


async def _session_refusal(request: Request) -> Response | None:
    """Why a form post has no valid session or CSRF field, or None."""
    guard = console_of(request).guard
    if not guard.logged_in(request):
        return message(request, 401, "Log in first", "Log in to act on schedules.", "/login")
    form = await request.form()
    given = form.get("csrf")
    if not isinstance(given, str) or not guard.csrf_ok(request, given):
        return message(
            request, 403, "Refused", "The form's CSRF token is missing or wrong: reload the page."
        )
    return None
