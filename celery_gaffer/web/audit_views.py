"""The audit log in the console: the ``/audit`` page and ``GET /api/audit``.

Newest first, filtered by schedule, actor, source and time (``since``), paged by id
(keyset: ``before`` is the id the next page starts below, never an ``OFFSET``).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from ..exceptions import InvalidInput
from ..readable import parse_instant
from ..store import audit
from .lists import read_whole
from .pages import console_of, render

#: Entries on one page, and at most in one API answer.
PAGE_SIZE = 50
MAX_LIMIT = 500


@dataclass(frozen=True, slots=True)
class AuditQuery:
    """What one read of the log asks for (every field optional but ``limit``)."""

    schedule: str | None
    actor: str | None
    source: str | None
    since: datetime | None
    before: int | None
    limit: int

    def params(self, **changed: str) -> str:
        """The query string of this query, with ``changed`` values (empties dropped)."""
        given = {
            "schedule": self.schedule or "",
            "actor": self.actor or "",
            "source": self.source or "",
            "since": self.since.isoformat() if self.since else "",
            **changed,
        }
        return urlencode({key: value for key, value in given.items() if value})


def read_query(request: Request, default_limit: int) -> AuditQuery:
    """The query of a request (InvalidInput naming a bad field)."""
    params = request.query_params
    source = params.get("source") or None
    if source is not None and source not in audit.SOURCES:
        raise InvalidInput(f"source: expected one of {', '.join(audit.SOURCES)}", field="source")
    since = None
    if params.get("since"):
        try:
            since = parse_instant(params["since"])
        except ValueError as exc:
            raise InvalidInput(f"since: {exc}", field="since") from exc
    return AuditQuery(
        schedule=params.get("schedule") or None,
        actor=params.get("actor") or None,
        source=source,
        since=since,
        before=read_whole(params, "before", what="an audit entry id"),
        limit=read_whole(params, "limit", most=MAX_LIMIT) or default_limit,
    )


def read_entries(request: Request, query: AuditQuery) -> list[audit.AuditEntry]:
    database = console_of(request).database
    with database.read() as conn:
        return audit.entries(
            conn,
            database.models,
            schedule=query.schedule,
            since=query.since,
            before_id=query.before,
            limit=query.limit,
            actor=query.actor,
            source=query.source,
        )


def api(request: Request) -> Response:
    """``GET /api/audit``: entries as ``AuditEntry.as_json``, newest first; a full page
    has a ``link`` header to the next one."""
    query = read_query(request, 100)
    found = read_entries(request, query)
    headers = {}
    if len(found) == query.limit:
        more = query.params(before=str(found[-1].id), limit=str(query.limit))
        headers["link"] = f'</api/audit?{more}>; rel="next"'
    return JSONResponse([entry.as_json() for entry in found], headers=headers)


def page(request: Request) -> Response:
    """``/audit``: the log, newest first, with its filters."""
    query = read_query(request, PAGE_SIZE)
    found = read_entries(request, query)
    next_url = None
    if len(found) == query.limit:
        next_url = "/audit?" + query.params(before=str(found[-1].id))
    first_url = "/audit?" + query.params() if query.before else None
    return render(
        request,
        "audit.html",
        title="Audit log",
        section="audit",
        entries=found,
        query=query,
        sources=audit.SOURCES,
        next_url=next_url,
        first_url=first_url,
    )
