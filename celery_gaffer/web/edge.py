"""What a request must be before any route sees it: a path and query without NUL, and a
body no larger than its route's cap.

A NUL cannot reach the database (PostgreSQL refuses it in text), so it is the request's
fault, answered 400 here rather than as an unavailable database. A body is refused
before it is parsed: at once when its ``Content-Length`` is over the cap, else as soon
as the bytes streamed in (a chunked body) pass it, so that no route ever buffers more.
"""

from __future__ import annotations

import logging
from urllib.parse import unquote_to_bytes

from starlette.datastructures import Headers
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

logger = logging.getLogger("celery_gaffer.web")

#: Largest body of a login or logout form.
FORM_BODY_LIMIT = 64 * 1024
#: Largest body of an action: a schedule's edit carries ``args``, ``kwargs`` and
#: ``options`` of up to 64 KiB of JSON each, which a form escapes up to three times over.
ACTION_BODY_LIMIT = 1024 * 1024

_SMALL_FORMS = ("/login", "/logout")


def body_limit(path: str) -> int:
    """The largest request body answered on ``path``."""
    return FORM_BODY_LIMIT if path.rstrip("/").endswith(_SMALL_FORMS) else ACTION_BODY_LIMIT


class BodyTooLarge(Exception):
    """The request's body streamed past its cap."""


class RequestEdge:
    """ASGI middleware: 400 for a NUL in the path or the query, 413 for a body over
    :func:`body_limit`."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path: str = scope["path"]
        if "\x00" in path or b"\x00" in unquote_to_bytes(scope.get("query_string", b"")):
            logger.info(
                "refused a request with NUL in its path or query",
                extra={"action": "web_request_refused"},
            )
            await _refusal(path, 400, "NUL is not allowed in a path or query")(scope, receive, send)
            return
        limit = body_limit(path)
        declared = Headers(scope=scope).get("content-length")
        if declared is not None and not (declared.isascii() and declared.isdigit()):
            await _refusal(path, 400, "Content-Length is not a number")(scope, receive, send)
            return
        if declared is not None and int(declared) > limit:
            await self._too_large(scope, receive, send, limit)
            return
        received = 0
        started = False

        async def counted_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    raise BodyTooLarge
            return message

        async def watched_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, counted_receive, watched_send)
        except BodyTooLarge:
            if started:
                raise
            await self._too_large(scope, receive, send, limit)

    async def _too_large(self, scope: Scope, receive: Receive, send: Send, limit: int) -> None:
        logger.info(
            "refused a request body over %d bytes",
            limit,
            extra={"action": "web_body_too_large"},
        )
        text = f"the request body is larger than {limit} bytes"
        # The rest of the body is never read: the connection closes after the answer.
        response = _refusal(scope["path"], 413, text)
        response.headers["connection"] = "close"
        await response(scope, receive, send)


def _refusal(path: str, status: int, text: str) -> Response:
    if path.startswith("/api/"):
        return JSONResponse({"error": text}, status)
    return PlainTextResponse(text, status)
