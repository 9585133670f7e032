"""Bulk pause, resume and trigger: ``POST /api/schedules/bulk`` and the console's
``/bulk`` page (a preview of what each schedule will do, then "Apply").

A bulk action names its schedules (1 to :data:`MAX_NAMES`) or a filter of the list
(``state``, ``task``, ``zone``, ``source``, ``q``): everything it matches, by name, at
most :data:`FILTER_CAP` (past that, a dry run says more match and applying is refused
until the filter is narrowed); a filter's dry run previews the first :data:`MAX_NAMES`
and counts the rest. Each schedule is previewed by the
rules of the operation itself: a resume by ``ScheduleStore.preview_resume``, a trigger
is one fire now, a pause no more fires until it is resumed. Each schedule is then
changed through the ``ScheduleStore`` in its own transaction, with its audit entry; an
unknown name, or one the operation refuses, is reported on its own line and the others
go on.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from urllib.parse import quote, urlencode

from sqlalchemy import Connection
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response

from ..beat.health import evaluate_safely
from ..exceptions import GafferError, InvalidInput, ScheduleNotFound
from ..protocol import Health, loads_json
from ..schedule_reads import checked_note
from ..schedule_store import ScheduleStore
from ..store.console import STATES
from ..store.selection import Selection, selected_rows
from . import actions
from .api import writer
from .console import Console
from .lists import read_whole
from .pages import FLASH_COOKIE, _refusal, console_of, message, render
from .present import iso

logger = logging.getLogger("celery_gaffer.web")

ACTIONS = ("pause", "resume", "trigger")
#: Most schedules one bulk action may name.
MAX_NAMES = 1000
#: Most schedules a filter may select.
FILTER_CAP = 10_000
#: The filter's fields (``q``: the name contains).
FILTER_FIELDS = ("state", "task", "zone", "source", "q")
#: Schedules listed on the console's preview page (the rest are counted).
LISTED = 200
_BATCH = 1000


@dataclass(frozen=True, slots=True)
class Bulk:
    """One bulk action: ``names``, or everything ``selection`` matches."""

    action: str
    names: list[str] | None
    selection: Selection | None
    note: str | None


@dataclass(frozen=True, slots=True)
class Chosen:
    """The schedules a bulk action is about, and whether its filter matched more."""

    names: list[str]
    more: bool


def read_json(body: Mapping[str, Any]) -> tuple[Bulk, bool]:
    """A bulk action from the API's JSON body, and its ``dry_run``."""
    unknown = sorted(set(body) - {"action", "names", "filter", "dry_run", "note"})
    if unknown:
        raise InvalidInput(f"{unknown[0]}: not a field of a bulk action", field=unknown[0])
    dry_run = body.get("dry_run", False)
    if not isinstance(dry_run, bool):
        raise InvalidInput("dry_run: expected true or false", field="dry_run")
    note = checked_note(body.get("note"))
    names, given = body.get("names"), body.get("filter")
    if (names is None) == (given is None):
        raise InvalidInput('names: give either "names" or "filter"', field="names")
    selection = None
    if given is not None:
        if not isinstance(given, dict) or not all(isinstance(v, str) for v in given.values()):
            raise InvalidInput("filter: expected an object of text fields", field="filter")
        selection = read_selection(given)
    else:
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise InvalidInput("names: expected a list of schedule names", field="names")
        names = checked_names(names)
    return Bulk(read_action(body.get("action")), names, selection, note or None), dry_run


def read_action(action: Any) -> str:
    if action not in ACTIONS:
        raise InvalidInput(f"action: expected one of {', '.join(ACTIONS)}", field="action")
    return str(action)


def checked_names(names: Sequence[str]) -> list[str]:
    """``names`` once each, in order: 1 to :data:`MAX_NAMES` of them."""
    unique = list(dict.fromkeys(names))
    if not 1 <= len(unique) <= MAX_NAMES:
        raise InvalidInput(f"names: expected 1 to {MAX_NAMES} schedule names", field="names")
    return unique


def read_selection(given: Mapping[str, str]) -> Selection:
    unknown = sorted(set(given) - set(FILTER_FIELDS))
    if unknown:
        raise InvalidInput(
            f"filter: {unknown[0]} is not one of {', '.join(FILTER_FIELDS)}", field="filter"
        )
    state = given.get("state") or None
    if state is not None and state not in STATES:
        raise InvalidInput(f"filter: state: expected one of {', '.join(STATES)}", field="filter")
    return Selection(
        state=state,
        task=given.get("task") or None,
        zone=given.get("zone") or None,
        source=given.get("source") or None,
        search=given.get("q") or None,
    )


def choose(console: Console, bulk: Bulk) -> Chosen:
    """The names of ``bulk``: as given, or what its filter matches now (by name, at most
    :data:`FILTER_CAP`), each filtered by its live state as the list shows it."""
    if bulk.names is not None:
        return Chosen(bulk.names, False)
    assert bulk.selection is not None
    now, database = console.clock(), console.database
    found: list[str] = []
    after = None
    with database.read() as conn:
        while len(found) <= FILTER_CAP:
            rows = selected_rows(
                conn, database.models, bulk.selection, now=now, limit=_BATCH, after=after
            )
            for row in rows:
                if _state_matches(conn, console, row, bulk.selection.state, now):
                    found.append(row["name"])
            if len(rows) < _BATCH:
                break
            after = rows[-1]["name"]
    return Chosen(found[:FILTER_CAP], len(found) > FILTER_CAP)


def _state_matches(
    conn: Connection, console: Console, row: Mapping[Any, Any], state: str | None, now: datetime
) -> bool:
    if state is None or state in (Health.ERROR, Health.PAUSED):
        return True  # the statement decided it
    check_at = row["check_at"]
    if row["health"] == Health.OK and (check_at is None or check_at > now):
        return state == Health.OK
    models, settings = console.database.models, console.database.settings
    health, _ = evaluate_safely(conn, models, row, now, settings)
    return health.state == state


def preview(console: Console, action: str, names: Sequence[str]) -> list[dict[str, Any]]:
    """What ``action`` would do to each of ``names``; writes nothing."""
    return [_preview_one(console, action, name) for name in names]


def _preview_one(console: Console, action: str, name: str) -> dict[str, Any]:
    store = console.store
    try:
        if action == "resume":
            found = store.preview_resume(name)
            return _line(name, "would", action, found.summary, found.fires, skipped=found.skipped)
        current = store.get(name)
        if action == "trigger":
            return _line(name, "would", action, "one fire now, with its own key", [console.clock()])
        if current.error is not None:
            return _line(name, "would", action, "in error: pausing keeps it from firing", [])
        if not current.enabled:
            return _line(name, "would", action, "already paused: nothing changes", [])
        return _line(name, "would", action, "no more fires until it is resumed", [])
    except GafferError as exc:
        return _refused(name, exc)


def apply(
    store: ScheduleStore, action: str, names: Sequence[str], note: str | None
) -> list[dict[str, Any]]:
    """Do ``action`` to each of ``names``, each in its own transaction."""
    return [_apply_one(store, action, name, note) for name in names]


def _apply_one(store: ScheduleStore, action: str, name: str, note: str | None) -> dict[str, Any]:
    try:
        if action == "pause":
            was = store.get(name).enabled
            store.pause(name, note=note)
            said = "paused: no more fires until it is resumed" if was else "already paused"
            line = _line(name, "done", action, said, [])
        elif action == "resume":
            resumed = store.resume(name, note=note)
            fires = [] if resumed.next_fire_at is None else [resumed.next_fire_at]
            line = _line(
                name, "done", action, f"resumed: next fire {iso(resumed.next_fire_at)}", fires
            )
        else:
            key = store.trigger(name, note=note)
            line = _line(name, "done", action, f"triggered: one fire sent with key {key}", [])
            line["key"] = key
    except GafferError as exc:
        return _refused(name, exc)
    logger.info(
        "console: bulk %s %s",
        action,
        name,
        extra={"action": f"web_bulk_{action}", "schedule": name},
    )
    return line


def _preview_url(bulk: Bulk) -> str:
    """The /bulk preview of a filter's ``bulk`` (its page, again)."""
    assert bulk.selection is not None
    query = {"action": bulk.action, "all": "1", **bulk.selection.as_query()}
    return "/bulk?" + urlencode(query)


def _line(
    name: str, verb: str, action: str, text: str, fires: Sequence[Any], **more: Any
) -> dict[str, Any]:
    return {"name": name, verb: action, "message": text, "fires": [iso(f) for f in fires], **more}


def _refused(name: str, exc: GafferError) -> dict[str, Any]:
    status = 404 if isinstance(exc, ScheduleNotFound) else 400
    return {"name": name, "status": status, "error": " ".join(str(exc).split())}


def summary(action: str, results: Sequence[Mapping[str, Any]], *, done: bool) -> str:
    """One line: how many schedules were (or would be) changed, and which were refused."""
    ok = sum(1 for line in results if "error" not in line)
    refused = [line["name"] for line in results if "error" in line]
    past = {"pause": "paused", "resume": "resumed", "trigger": "triggered"}[action]
    text = f"{past} {ok} schedule{'s' if ok != 1 else ''}" if done else f"{action} {ok}"
    if refused:
        shown = ", ".join(refused[:5]) + (" …" if len(refused) > 5 else "")
        text += f"; {len(refused)} refused or unknown: {shown}"
    return text


# -- the API -----------------------------------------------------------------------------


async def api(request: Request) -> Response:
    """``POST /api/schedules/bulk``: the Bearer token, as every API write."""
    caller = writer(request)
    if isinstance(caller, Response):
        return caller
    body = loads_json(await request.body(), "body")
    if not isinstance(body, dict):
        raise InvalidInput("body: expected a JSON object", field="body")
    bulk, dry_run = read_json(body)
    store = actions.store_for(console_of(request).store, caller, "api")
    return await run_in_threadpool(_api, console_of(request), store, bulk, dry_run)


def _api(console: Console, store: ScheduleStore, bulk: Bulk, dry_run: bool) -> Response:
    chosen = choose(console, bulk)
    if chosen.more and not dry_run:
        raise InvalidInput(
            f"filter: matches more than {FILTER_CAP:,} schedules: narrow it", field="filter"
        )
    if dry_run:
        # A filter's preview lists its first MAX_NAMES schedules; ``matched`` counts all.
        results = preview(console, bulk.action, chosen.names[:MAX_NAMES])
    else:
        results = apply(store, bulk.action, chosen.names, bulk.note)
    body: dict[str, Any] = {"action": bulk.action, "dry_run": dry_run, "results": results}
    if bulk.selection is not None:
        body.update(matched=len(chosen.names), more=chosen.more, limit=FILTER_CAP)
    return JSONResponse(body)


# -- the console's page --------------------------------------------------------------------


def read_form(values: Any) -> Bulk:
    """A bulk action from the list's form (``action``, ``name`` repeated or ``all=1``
    with the filter's fields, ``note``): a query string or a posted form."""
    action = read_action(values.get("action"))
    note = checked_note(values.get("note") or None)
    if values.get("all") == "1":
        given = {key: values.get(key) or "" for key in FILTER_FIELDS}
        return Bulk(action, None, read_selection(given), note)
    names = [name for name in values.getlist("name") if isinstance(name, str) and name]
    return Bulk(action, checked_names(names), None, note)


def page(request: Request) -> Response:
    """``GET /bulk``: what the action would do to each schedule, and the Apply form."""
    console = console_of(request)
    bulk = read_form(request.query_params)
    chosen = choose(console, bulk)
    results = preview(console, bulk.action, chosen.names[:LISTED])
    hidden = [("action", bulk.action)]
    if bulk.selection is not None:
        hidden.append(("all", "1"))
        hidden += [
            (key, value)
            for key, value in request.query_params.items()
            if key in FILTER_FIELDS and value
        ]
        # Apply is refused if the filter matches another number by then.
        hidden.append(("expected", str(len(chosen.names))))
    else:
        hidden += [("name", name) for name in chosen.names]
    return render(
        request,
        "bulk.html",
        title=f"Bulk {bulk.action}",
        section="schedules",
        action=bulk.action,
        results=results,
        count=len(chosen.names),
        more=chosen.more,
        cap=FILTER_CAP,
        listed=LISTED,
        hidden=hidden,
        refused=[line for line in results if "error" in line],
    )


async def apply_form(request: Request) -> Response:
    """``POST /bulk``: apply, then back to the list with a line saying what was done."""
    refused = await _refusal(request)
    if refused is not None:
        return refused
    form = await request.form()
    bulk = read_form(form)
    expected = None
    if bulk.selection is not None:
        given = form.get("expected")
        text = given if isinstance(given, str) else ""
        expected = read_whole({"expected": text}, "expected", most=FILTER_CAP)
        if expected is None:
            raise InvalidInput("expected: the previewed count is missing", field="expected")
    return await run_in_threadpool(_apply_form, request, bulk, expected)


def _apply_form(request: Request, bulk: Bulk, expected: int | None) -> Response:
    """Apply ``bulk``; a filter's only if it still matches the ``expected`` schedules
    its preview counted (else nothing is done: preview again)."""
    console = console_of(request)
    chosen = choose(console, bulk)
    if chosen.more:
        return message(
            request,
            400,
            "Refused",
            f"The filter matches more than {FILTER_CAP:,} schedules: narrow it.",
        )
    if expected is not None and len(chosen.names) != expected:
        count = len(chosen.names)
        return message(
            request,
            400,
            "Refused",
            f"The filter now matches {count} schedule{'s' if count != 1 else ''}, not"
            f" {expected}: preview again.",
            _preview_url(bulk),
        )
    store = actions.store_for(console.store, console.guard.caller(request), "console")
    results = apply(store, bulk.action, chosen.names, bulk.note)
    response = RedirectResponse("/schedules", status_code=303)
    text = summary(bulk.action, results, done=True)
    response.set_cookie(FLASH_COOKIE, quote(text), httponly=True, samesite="strict", path="/")
    return response
