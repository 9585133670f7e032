"""Who may act on the console: the token, the session cookie, CSRF, security headers.

The console is read-only unless a token is configured. With one, API writes carry it as
``Authorization: Bearer <token>``; pages log in once and get a session cookie whose value
is an HMAC of the token (so changing the token logs everyone out; no server state), and
every form posts a CSRF field that is an HMAC of the token and the session. Every
comparison is constant-time.
"""

from __future__ import annotations

import hashlib
import hmac
import os
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from starlette.datastructures import Headers
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

SESSION_COOKIE = "gaffer_session"
#: Sent on every response.
SECURITY_HEADERS = {
    "content-security-policy": "default-src 'self'; form-action 'self'; base-uri 'none'",
    "x-frame-options": "DENY",
    "referrer-policy": "no-referrer",
    "x-content-type-options": "nosniff",
    "cache-control": "no-store",
}
READ_ONLY = "this console is read-only: set gaffer_web_token (or GAFFER_WEB_TOKEN) to allow actions"


def resolve_token(app: Any, token: str | None) -> str:
    """The token actions need: ``token`` when given, else ``app.conf.gaffer_web_token``,
    else the environment's ``GAFFER_WEB_TOKEN``; "" means read-only."""
    if token is not None:
        return token
    configured = app.conf.get("gaffer_web_token")
    if configured:
        return str(configured)
    return os.environ.get("GAFFER_WEB_TOKEN", "")


@dataclass(frozen=True, slots=True)
class Guard:
    """The console's token and the checks built on it."""

    token: str

    @property
    def read_only(self) -> bool:
        return not self.token

    def _mac(self, purpose: str, value: str = "") -> str:
        message = f"{purpose}:{value}".encode()
        return hmac.new(self.token.encode(), message, hashlib.sha256).hexdigest()

    def session_value(self) -> str:
        """The session cookie's value for this token."""
        return self._mac("session")

    def token_matches(self, given: str) -> bool:
        return not self.read_only and hmac.compare_digest(given.encode(), self.token.encode())

    def bearer_ok(self, request: Request) -> bool:
        scheme, _, given = request.headers.get("authorization", "").partition(" ")
        return scheme.lower() == "bearer" and self.token_matches(given.strip())

    def logged_in(self, request: Request) -> bool:
        given = request.cookies.get(SESSION_COOKIE, "")
        return not self.read_only and hmac.compare_digest(
            given.encode(), self.session_value().encode()
        )

    def csrf_token(self, request: Request) -> str:
        """The CSRF field of this session's forms ("" when not logged in)."""
        if not self.logged_in(request):
            return ""
        return self._mac("csrf", request.cookies.get(SESSION_COOKIE, ""))

    def csrf_ok(self, request: Request, given: str) -> bool:
        expected = self.csrf_token(request)
        return bool(expected) and hmac.compare_digest(given.encode(), expected.encode())


def host_name(header: str) -> str:
    """The name of a ``Host`` header, without its port: ``[::1]:5557`` -> ``::1``."""
    header = header.strip().lower()
    if header.startswith("["):
        return header[1:].partition("]")[0]
    return header.rpartition(":")[0] if header.count(":") == 1 else header


class SecurityHeaders:
    """ASGI middleware adding :data:`SECURITY_HEADERS` to every HTTP response, and
    answering 400 to a ``Host`` not in ``allowed_hosts`` (when given)."""

    def __init__(self, app: ASGIApp, allowed_hosts: Collection[str] | None = None) -> None:
        self.app = app
        self.allowed = None if allowed_hosts is None else {h.lower() for h in allowed_hosts}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if self.allowed is not None:
            host = host_name(Headers(scope=scope).get("host", ""))
            if host not in self.allowed:
                refused = PlainTextResponse("this console does not answer to that host", 400)
                await refused(scope, receive, send)
                return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                present = {name.lower() for name, _ in headers}
                for name, value in SECURITY_HEADERS.items():
                    if name.encode() not in present:
                        headers.append((name.encode(), value.encode()))
                message["headers"] = headers
            await send(message)

        await self.app(scope, receive, send_with_headers)
