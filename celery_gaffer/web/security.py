"""Who may read and act on the console: its tokens, the session cookie, CSRF, the
read gate and the security headers.

The console is read-only unless a token that may act is configured
(:mod:`.tokens`). API calls carry a token as ``Authorization: Bearer <token>``; pages
log in once and get a session cookie holding the token's name and an HMAC of it keyed
by its token (so changing a token logs its users out; no server state), and every form
posts a CSRF field that is an HMAC of the session keyed by its token. A token's name is
the actor of what is done with it. A token that may only read is refused (403) anything
but reading, logging in and out. With such a token configured, reading needs a token
too (:class:`ReadGate`): 401 under ``/api/``, a redirect to ``/login`` for a page.
Every comparison of a secret is constant-time.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
from collections.abc import Collection
from dataclasses import dataclass

from starlette.datastructures import Headers
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, RedirectResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .tokens import Token, resolve_token

__all__ = [
    "READ_ONLY",
    "SECURITY_HEADERS",
    "SESSION_COOKIE",
    "Guard",
    "ReadGate",
    "SecurityHeaders",
    "Token",
    "host_name",
    "resolve_token",
]

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
#: Paths answered without a token whatever the gate says: logging in needs them.
OPEN_PATHS = ("/login", "/logout", "/console.css", "/console.js")
_READING = ("GET", "HEAD")


def _mac(token: Token, purpose: str, value: str = "") -> str:
    message = f"{purpose}:{value}".encode()
    return hmac.new(token.secret.encode(), message, hashlib.sha256).hexdigest()


def _name_in_cookie(name: str) -> str:
    return base64.urlsafe_b64encode(name.encode()).decode().rstrip("=")


def _name_from_cookie(text: str) -> str | None:
    try:
        return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)).decode()
    except (binascii.Error, UnicodeDecodeError, ValueError):
        return None


@dataclass(frozen=True, slots=True)
class Guard:
    """The console's tokens and the checks built on them."""

    tokens: tuple[Token, ...] = ()

    @property
    def read_only(self) -> bool:
        """No token may act: every action is refused."""
        return all(token.read_only for token in self.tokens)

    @property
    def reads_need_token(self) -> bool:
        """A token that may only read is configured: reading needs a token too."""
        return any(token.read_only for token in self.tokens)

    def token_for(self, given: str) -> Token | None:
        """The token whose secret is ``given`` (each one compared, in constant time)."""
        found = None
        for token in self.tokens:
            if hmac.compare_digest(given.encode(), token.secret.encode()):
                found = token
        return found

    def token_matches(self, given: str) -> bool:
        return self.token_for(given) is not None

    def bearer(self, request: Request) -> Token | None:
        """The token of the request's ``Authorization: Bearer`` header, if it is one."""
        scheme, _, given = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not given.strip():
            return None
        return self.token_for(given.strip())

    def bearer_ok(self, request: Request) -> bool:
        """The request carries a token that may act."""
        token = self.bearer(request)
        return token is not None and not token.read_only

    def session_value(self, token: Token) -> str:
        """The session cookie's value of ``token``: its name, and an HMAC keyed by it."""
        return f"{_name_in_cookie(token.name)}.{_mac(token, 'session', token.name)}"

    def session(self, request: Request) -> Token | None:
        """The token the request's session cookie was made for, if it is valid."""
        name_text, _, mac = request.cookies.get(SESSION_COOKIE, "").partition(".")
        name = _name_from_cookie(name_text) if name_text else None
        for token in self.tokens:
            if token.name == name:
                expected = _mac(token, "session", token.name)
                return token if hmac.compare_digest(mac.encode(), expected.encode()) else None
        return None

    def caller(self, request: Request) -> Token | None:
        """Who makes the request: its Bearer token, else its session's."""
        return self.bearer(request) or self.session(request)

    def logged_in(self, request: Request) -> bool:
        return self.session(request) is not None

    def may_act(self, request: Request) -> bool:
        """The request's session (or Bearer token) may act."""
        caller = self.caller(request)
        return caller is not None and not caller.read_only

    def csrf_token(self, request: Request) -> str:
        """The CSRF field of this session's forms ("" when not logged in)."""
        token = self.session(request)
        if token is None:
            return ""
        return _mac(token, "csrf", request.cookies.get(SESSION_COOKIE, ""))

    def csrf_ok(self, request: Request, given: str) -> bool:
        expected = self.csrf_token(request)
        return bool(expected) and hmac.compare_digest(given.encode(), expected.encode())


class ReadGate:
    """ASGI middleware: when :attr:`Guard.reads_need_token`, a request without a valid
    session or Bearer token gets 401 under ``/api/`` and a redirect to ``/login`` on a
    page; and a token that may only read gets 403 for anything but reading (everywhere
    but :data:`OPEN_PATHS`)."""

    def __init__(self, app: ASGIApp, guard: Guard) -> None:
        self.app = app
        self.guard = guard

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in OPEN_PATHS:
            await self.app(scope, receive, send)
            return
        refused = self.refusal(Request(scope))
        if refused is None:
            await self.app(scope, receive, send)
            return
        await refused(scope, receive, send)

    def refusal(self, request: Request) -> Response | None:
        api = request.url.path.startswith("/api/")
        caller = self.guard.caller(request)
        if caller is None:
            if not self.guard.reads_need_token:
                return None
            if api:
                text = "this console needs a token: send Authorization: Bearer <token>"
                headers = {"www-authenticate": "Bearer"}
                return JSONResponse({"error": text}, 401, headers=headers)
            if request.method in _READING:
                return RedirectResponse("/login", status_code=303)
            return PlainTextResponse("log in first", 401)
        if caller.read_only and request.method not in _READING:
            text = f"the token {caller.name!r} may only read"
            return JSONResponse({"error": text}, 403) if api else PlainTextResponse(text, 403)
        return None


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
