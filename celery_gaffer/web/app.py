"""``create_app``: the web console of one Celery app, as a Starlette (ASGI) application."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Collection
from importlib.resources import files
from typing import Any

from sqlalchemy.exc import SQLAlchemyError
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ..clock import Clock, utcnow
from ..exceptions import DatabaseNotReady, DatabaseUnavailable, GafferError, ScheduleNotFound
from ..schedule_store import ScheduleStore
from ..store import database_for
from ..store.database import driver_reason
from . import api, audit_views, bulk, overview, pages, run_page
from .console import Console
from .edge import RequestEdge
from .security import Guard, ReadGate, SecurityHeaders
from .tokens import configured_tokens

logger = logging.getLogger("celery_gaffer.web")

_STYLESHEET = files("celery_gaffer.web").joinpath("templates/console.css")
_SCRIPT = files("celery_gaffer.web").joinpath("templates/console.js")


def create_app(
    celery_app: Any,
    *,
    token: str | None = None,
    clock: Clock | None = None,
    allowed_hosts: Collection[str] | None = None,
) -> Starlette:
    """The console of ``celery_app``'s Gaffer database (checked: it must be migrated).

    ``token`` is what actions need; None reads ``app.conf.gaffer_web_token``, then the
    environment's ``GAFFER_WEB_TOKEN``; "" (or neither set) makes the console read-only
    unless ``app.conf.gaffer_web_tokens`` names tokens that may act (and
    ``gaffer_web_read_tokens`` tokens that may only read; see the configuration reference).
    ``clock`` is "now" for health and next fires (tests pass a fixed one).
    ``allowed_hosts``: the only ``Host`` names answered (others get 400, which stops a
    DNS-rebinding page from reading the console); None answers any (behind a proxy that
    checks it). ``celery gaffer web`` on a loopback address allows only loopback names.
    """
    database = database_for(celery_app)
    database.check_ready()
    now = clock or utcnow
    guard = Guard(configured_tokens(celery_app, token))
    console = Console(
        app=celery_app,
        database=database,
        store=ScheduleStore(celery_app, clock=now),
        guard=guard,
        clock=now,
    )
    routes = [
        Route("/", overview.page),
        Route("/audit", audit_views.page),
        Route("/bulk", bulk.page, methods=["GET"]),
        Route("/bulk", bulk.apply_form, methods=["POST"]),
        Route("/console.css", stylesheet),
        Route("/console.js", script),
        Route("/schedules", pages.schedules),
        Route("/schedules/{name:path}/{action}", pages.act, methods=["POST"]),
        Route("/schedules/{name:path}", pages.detail),
        Route("/runs", pages.runs),
        Route("/runs/{id}", run_page.page),
        Route("/alerts", pages.alerts),
        Route("/login", pages.login_form, methods=["GET"]),
        Route("/login", pages.login, methods=["POST"]),
        Route("/logout", pages.logout, methods=["POST"]),
        Route("/api/overview", overview.api),
        Route("/api/audit", audit_views.api),
        Route("/api/schedules", api.schedules),
        Route("/api/schedules/bulk", bulk.api, methods=["POST"]),
        Route("/api/schedules/{name:path}/{action}", api.act, methods=["POST"]),
        Route("/api/schedules/{name:path}", api.schedule, methods=["GET"]),
        Route("/api/schedules/{name:path}", api.edit, methods=["PATCH"]),
        Route("/api/runs", api.runs),
        Route("/api/runs/{id}", run_page.api_run),
        Route("/api/alerts", api.alerts),
    ]
    kept = overview.Kept()

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        # Served (uvicorn runs this): the overview's first read starts at once.
        app.state.overview_warm_up = overview.warm_up(console, kept)
        yield

    app = Starlette(
        routes=routes,
        lifespan=lifespan,
        # The edge inside the headers: its refusals carry the security headers too.
        middleware=[
            Middleware(SecurityHeaders, allowed_hosts=allowed_hosts),
            Middleware(RequestEdge),
            Middleware(ReadGate, guard=guard),
        ],
        exception_handlers={
            GafferError: gaffer_error,
            SQLAlchemyError: gaffer_error,
            HTTPException: http_error,
        },
    )
    app.state.console = console
    app.state.overview_kept = kept
    return app


def stylesheet(request: Request) -> Response:
    return Response(_STYLESHEET.read_text(), media_type="text/css")


def script(request: Request) -> Response:
    """The pages' one script (theme, relative times, live updates): served from the
    package, so the security policy's ``default-src 'self'`` allows it and nothing inline."""
    return Response(_SCRIPT.read_text(), media_type="text/javascript")


async def gaffer_error(request: Request, exc: Exception) -> Response:
    """A GafferError as a 400 (404 for an unknown schedule, 503 for the database), in
    JSON under ``/api/``, else as a page. The database's URL is never shown."""
    status = 400
    text = str(exc)
    if isinstance(exc, ScheduleNotFound):
        status = 404
    elif isinstance(exc, (DatabaseUnavailable, DatabaseNotReady, SQLAlchemyError)):
        reason = driver_reason(exc) if isinstance(exc, SQLAlchemyError) else str(exc)
        logger.error("%s", reason, extra={"action": "web_database_unavailable"})
        status, text = 503, "the Gaffer database is unavailable: see the console's log"
    if request.url.path.startswith("/api/"):
        return api.error(status, text)
    return pages.message(request, status, "Refused" if status < 500 else "Unavailable", text)


async def http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    if request.url.path.startswith("/api/"):
        return JSONResponse({"error": exc.detail}, exc.status_code)
    title = {404: "Not found", 405: "Not allowed"}.get(exc.status_code, "Error")
    return pages.message(request, exc.status_code, title, str(exc.detail))
