"""Outbound HTTP to receivers the project does not control: alert webhooks and pings.

Every such request goes through :func:`deliver`, which keeps four promises:

* a total deadline: connecting, the TLS handshake, sending and reading the answer end
  by it together (each socket operation gets only what is left of it), so a receiver
  that answers slowly, or dribbles its answer a byte at a time, costs at most that;
* a small read: the status line and headers only, at most :data:`MAX_REPLY` bytes; the
  body is never read, so an endless one costs nothing;
* no redirect followed: a 3xx answer is a failed delivery (retried by the caller like any
  other), so a POST is never turned into a GET elsewhere;
* credentials (a user-info in the URL, sent as HTTP Basic authentication) go to the URL's
  own origin only, which follows from the above.

Name resolution is left to the system resolver and its own timeouts; callers run this on
threads of their own, never on Beat's tick. Proxy environment variables are not used:
the request goes straight to the URL's host.
"""

from __future__ import annotations

import base64
import http.client
import io
import socket
import ssl
import time
from collections.abc import Mapping
from functools import cache
from urllib.parse import quote, unquote, urlsplit

from .exceptions import GafferError
from .settings import masked_ping_url
from .text import printable

#: Most bytes of an answer read: its status line and headers must fit.
MAX_REPLY = 64 * 1024
#: What a request target may keep as is (anything else, a space or a control character
#: above all, is percent-encoded, so the URL cannot add a header).
_SAFE = "!#$%&'()*+,/:;=?@[]~-._"
_PORTS = {"http": 80, "https": 443}


class DeliveryFailed(GafferError, OSError):
    """An outbound request failed: no answer in time, a refused connection, a 3xx, 4xx or
    5xx answer, or an answer that is not HTTP. The message never holds the URL's path,
    query or credentials."""


def deliver(
    method: str,
    url: str,
    *,
    timeout: float,
    body: bytes | None = None,
    headers: Mapping[str, str] | None = None,
) -> int:
    """Send one request to ``url`` and return its 2xx status; raise :class:`DeliveryFailed`
    for anything else, within ``timeout`` seconds in all (see the module's notes)."""
    parts = urlsplit(url)
    try:
        port = parts.port or _PORTS.get(parts.scheme)
    except ValueError as exc:
        raise DeliveryFailed(f"the URL's port is not a number: {masked_ping_url(url)}") from exc
    host = parts.hostname
    if port is None or not host:
        raise DeliveryFailed(f"not an http(s) URL: {masked_ping_url(url)}")
    ends = time.monotonic() + timeout
    try:
        head = _head(method, url, host, port, body, headers or {})
        raw = _exchange(parts.scheme == "https", host, port, head + (body or b""), ends)
        return _status(raw)
    except DeliveryFailed:
        raise
    except TimeoutError as exc:
        raise DeliveryFailed(f"no answer within {timeout:g} s") from exc
    # Refused, reset, TLS, a host that is not IDNA, headers http.client cannot parse.
    except (OSError, ValueError, http.client.HTTPException) as exc:
        raise DeliveryFailed(f"{type(exc).__name__}: {_clean(str(exc))}") from exc


def _head(
    method: str, url: str, host: str, port: int, body: bytes | None, extra: Mapping[str, str]
) -> bytes:
    """The request line and headers; the URL's user-info as Basic authentication."""
    parts = urlsplit(url)
    target = quote(parts.path or "/", safe=_SAFE)
    if parts.query:
        target += "?" + quote(parts.query, safe=_SAFE)
    name = host.encode("idna").decode("ascii")
    if ":" in name:
        name = f"[{name}]"
    if port != _PORTS[parts.scheme]:
        name += f":{port}"
    lines = [
        f"{method} {target} HTTP/1.1",
        f"Host: {name}",
        "User-Agent: celery-gaffer",
        "Connection: close",
        f"Content-Length: {len(body or b'')}",
    ]
    if parts.username is not None:
        credentials = f"{unquote(parts.username)}:{unquote(parts.password or '')}"
        lines.append("Authorization: Basic " + base64.b64encode(credentials.encode()).decode())
    for key, value in extra.items():
        if any(ord(c) < 32 for c in key + value):
            raise DeliveryFailed(f"header {key!r} holds a control character")
        lines.append(f"{key}: {value}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def _left(ends: float) -> float:
    left = ends - time.monotonic()
    if left <= 0:
        raise TimeoutError("deadline passed")
    return left


def _exchange(secure: bool, host: str, port: int, request: bytes, ends: float) -> bytes:
    """Connect, send ``request`` and read the answer's head, all by ``ends``."""
    sock = _connect(host, port, ends)
    try:
        if secure:
            sock.settimeout(_left(ends))  # the handshake as a whole gets what is left
            sock = _tls().wrap_socket(sock, server_hostname=host)
        sock.settimeout(_left(ends))  # sendall: a total for all the data since 3.5
        sock.sendall(request)
        return _read_head(sock, ends)
    finally:
        sock.close()


def _connect(host: str, port: int, ends: float) -> socket.socket:
    """A connected socket to the first address of ``host`` that answers, by ``ends``."""
    error: OSError = OSError(f"no address for {host}")
    for family, kind, proto, _, address in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM):
        sock = socket.socket(family, kind, proto)
        try:
            sock.settimeout(_left(ends))
            sock.connect(address)
        except OSError as exc:
            sock.close()
            if isinstance(exc, TimeoutError):
                raise
            error = exc
            continue
        return sock
    raise error


@cache
def _tls() -> ssl.SSLContext:
    # Made on first use (it reads the system's CA certificates), once per process.
    return ssl.create_default_context()


def _read_head(sock: socket.socket, ends: float) -> bytes:
    """The answer's status line and headers (an interim 1xx answer skipped), reading at
    most :data:`MAX_REPLY` bytes in all."""
    buffer = b""
    while True:
        end = buffer.find(b"\r\n\r\n")
        if end >= 0:
            head, buffer = buffer[: end + 4], buffer[end + 4 :]
            status = head[9:12]  # after "HTTP/1.x "
            if not status.startswith(b"1") or status == b"101":
                return head
            continue  # "100 Continue" and the like: the answer follows
        if len(buffer) >= MAX_REPLY:
            raise DeliveryFailed(f"the answer's headers are longer than {MAX_REPLY} bytes")
        sock.settimeout(_left(ends))
        chunk = sock.recv(MAX_REPLY - len(buffer))
        if not chunk:
            raise DeliveryFailed("the connection was closed before an answer")
        buffer += chunk


def _status(head: bytes) -> int:
    """The status of a 2xx answer; DeliveryFailed for any other."""
    line, _, rest = head.partition(b"\r\n")
    version, _, after = line.decode("latin-1").partition(" ")
    code, _, reason = after.partition(" ")
    if not version.startswith("HTTP/") or len(code) != 3 or not code.isdigit():
        raise DeliveryFailed(f"the answer is not HTTP: {_clean(line.decode('latin-1'))!r}")
    status = int(code)
    said = f"answered {status} {_clean(reason)}".rstrip()
    if 200 <= status < 300:
        return status
    if 300 <= status < 400:
        location = http.client.parse_headers(io.BytesIO(rest)).get("Location")
        raise DeliveryFailed(f"{said}: redirects are not followed{_where(location)}")
    raise DeliveryFailed(said)


def _where(location: str | None) -> str:
    """Where a redirect pointed, as ``scheme://host/***`` (its path may be a secret)."""
    if not location:
        return ""
    if not urlsplit(location).netloc:
        return " (to a path of the same host)"
    return f" (to {masked_ping_url(_clean(location))})"


def _clean(text: str) -> str:
    """``text`` on one line, control characters escaped, cut to a readable length."""
    return printable(" ".join(text.split()))


__all__ = ["MAX_REPLY", "DeliveryFailed", "deliver"]
