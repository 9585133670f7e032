"""Outbound requests against real misbehaving receivers on 127.0.0.1: a total deadline,
a bounded read, no redirect followed, credentials to the URL's own host only."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator

import pytest

from celery_gaffer.beat.alerts import post
from celery_gaffer.outbound import MAX_REPLY, DeliveryFailed, deliver

from ..receivers import (
    RawReceiver,
    Request,
    dribble,
    endless_body,
    endless_headers,
    hang,
    redirect,
    slow,
    status,
)


@pytest.fixture
def stop() -> Iterator[threading.Event]:
    event = threading.Event()
    yield event
    event.set()


def _timed(call: object, *args: object, **kwargs: object) -> tuple[float, BaseException | None]:
    started = time.monotonic()
    try:
        call(*args, **kwargs)  # type: ignore[operator]
    except BaseException as exc:  # noqa: BLE001 - returned for the test to look at
        return time.monotonic() - started, exc
    return time.monotonic() - started, None


def test_a_2xx_answer_is_a_delivery_and_its_status_is_returned() -> None:
    receiver = RawReceiver(status(204, "No Content"))
    try:
        assert deliver("GET", receiver.url("/x?y=1"), timeout=5) == 204
    finally:
        receiver.stop()
    [request] = receiver.requests
    assert request.head.startswith("GET /x?y=1 HTTP/1.1\r\n")
    assert request.header("Host") == f"127.0.0.1:{receiver.port}"
    assert request.header("Authorization") is None


def test_a_post_sends_json_and_the_user_info_as_basic_auth_to_that_host() -> None:
    receiver = RawReceiver(status(200))
    try:
        post(receiver.url("/in?token=t", user="hook:s3cret-pw@"), {"a": 1})
    finally:
        receiver.stop()
    [request] = receiver.requests
    assert request.head.startswith("POST /in?token=t HTTP/1.1\r\n")
    assert json.loads(request.body) == {"a": 1}
    assert request.header("Content-Type") == "application/json"
    assert request.header("Authorization") == "Basic aG9vazpzM2NyZXQtcHc="
    assert "s3cret" not in request.head.split("\r\n")[0]


def test_a_slow_answer_fails_at_the_deadline() -> None:
    receiver = RawReceiver(slow(3))
    try:
        took, error = _timed(deliver, "GET", receiver.url(), timeout=0.5)
    finally:
        receiver.stop()
    assert isinstance(error, DeliveryFailed)
    assert str(error) == "no answer within 0.5 s"
    assert took < 1.5


def test_an_answer_dribbled_a_byte_at_a_time_still_ends_at_the_deadline(
    stop: threading.Event,
) -> None:
    # Each byte comes well within a per-operation timeout: only a total deadline ends it.
    receiver = RawReceiver(dribble(stop, every=0.05))
    try:
        took, error = _timed(deliver, "GET", receiver.url(), timeout=1.0)
    finally:
        stop.set()
        receiver.stop()
    assert isinstance(error, DeliveryFailed)
    assert "no answer within 1 s" in str(error)
    assert took < 2.0


def test_an_endless_body_is_not_read(stop: threading.Event) -> None:
    receiver = RawReceiver(endless_body(stop))
    try:
        took, error = _timed(deliver, "POST", receiver.url(), timeout=5, body=b"{}")
    finally:
        stop.set()
        receiver.stop()
    assert error is None
    assert took < 1.0


def test_endless_headers_fail_after_a_bounded_read(stop: threading.Event) -> None:
    receiver = RawReceiver(endless_headers(stop))
    try:
        took, error = _timed(deliver, "GET", receiver.url(), timeout=5)
    finally:
        stop.set()
        receiver.stop()
    assert isinstance(error, DeliveryFailed)
    assert f"longer than {MAX_REPLY} bytes" in str(error)
    assert took < 2.0


@pytest.mark.parametrize("code", [301, 302, 303, 307, 308])
def test_a_redirect_is_a_failed_delivery_and_is_not_followed(code: int) -> None:
    other = RawReceiver(status(200))
    receiver = RawReceiver(redirect(other.url("/steal?k=secret-path"), code))
    try:
        with pytest.raises(DeliveryFailed) as caught:
            post(receiver.url("/in", user="hook:s3cret-pw@"), {"a": 1})
    finally:
        receiver.stop()
        other.stop()
    assert other.requests == []  # nothing, credentials least of all, went elsewhere
    message = str(caught.value)
    assert message.startswith(f"answered {code} Found: redirects are not followed")
    assert f"http://127.0.0.1:{other.port}/***" in message
    assert "secret-path" not in message
    assert "s3cret" not in message


def test_a_redirect_with_headers_http_client_refuses_is_a_failed_delivery_too() -> None:
    many = "".join(f"X-Padding-{n}: {n}\r\n" for n in range(150))
    receiver = RawReceiver(status(302, "Found", f"Location: http://elsewhere/x\r\n{many}"))
    try:
        with pytest.raises(DeliveryFailed, match="HTTPException: got more than 100 headers"):
            deliver("GET", receiver.url(), timeout=5.0)
    finally:
        receiver.stop()


def test_a_refused_connection_and_an_answer_that_is_not_http_fail_in_one_line() -> None:
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]
    with pytest.raises(DeliveryFailed) as refused:
        deliver("GET", f"http://127.0.0.1:{port}/secret-path", timeout=2)
    assert "ConnectionRefusedError" in str(refused.value)
    assert "secret-path" not in str(refused.value)

    def garbage(request: Request, sock: socket.socket) -> None:
        sock.sendall(b"SSH-2.0-OpenSSH\x1b[31m\r\n\r\n")

    receiver = RawReceiver(garbage)
    try:
        with pytest.raises(DeliveryFailed) as caught:
            deliver("GET", receiver.url(), timeout=2)
    finally:
        receiver.stop()
    assert str(caught.value).startswith("the answer is not HTTP")
    assert "\x1b" not in str(caught.value)


def test_control_characters_in_the_url_cannot_add_a_header() -> None:
    receiver = RawReceiver(status(200))
    try:
        deliver("GET", receiver.url("/a b\r\nX-Injected: 1"), timeout=2)
    finally:
        receiver.stop()
    [request] = receiver.requests
    assert request.header("X-Injected") is None
    # (urlsplit drops CR and LF; a space, a tab or another control is percent-encoded)
    assert request.head.split("\r\n")[0] == "GET /a%20bX-Injected:%201 HTTP/1.1"


def test_a_url_that_is_not_http_is_refused_without_echoing_it() -> None:
    with pytest.raises(DeliveryFailed) as caught:
        deliver("GET", "ftp://user:pw@host/secret", timeout=1)
    assert "pw" not in str(caught.value)
    assert "secret" not in str(caught.value)


def test_a_tls_handshake_that_never_ends_fails_at_the_deadline(stop: threading.Event) -> None:
    receiver = RawReceiver(hang(stop))  # accepts, and never says a word
    try:
        url = f"https://127.0.0.1:{receiver.port}/x"
        took, error = _timed(deliver, "POST", url, timeout=0.5, body=b"{}")
    finally:
        stop.set()
        receiver.stop()
    assert isinstance(error, DeliveryFailed)
    assert str(error) == "no answer within 0.5 s"
    assert took < 1.5
