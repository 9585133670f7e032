"""Misbehaving HTTP receivers on 127.0.0.1 for the outbound-request tests: real sockets,
each connection answered by a function of the request (slow, endless, redirecting...)."""

from __future__ import annotations

import socket
import socketserver
import threading
import time
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass, field


@dataclass
class Request:
    head: str
    body: bytes

    @property
    def path(self) -> str:
        return self.head.split(" ", 2)[1]

    def header(self, name: str) -> str | None:
        for line in self.head.split("\r\n")[1:]:
            key, _, value = line.partition(":")
            if key.strip().lower() == name.lower():
                return value.strip()
        return None


Answer = Callable[[Request, socket.socket], None]


@dataclass
class RawReceiver:
    """Records every request and answers it with ``answer(request, sock)``."""

    answer: Answer
    requests: list[Request] = field(default_factory=list)
    stopping: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        receiver = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                sock: socket.socket = self.request
                sock.settimeout(30)
                data = b""
                while b"\r\n\r\n" not in data:
                    chunk = sock.recv(65536)
                    if not chunk:
                        return
                    data += chunk
                head, _, body = data.partition(b"\r\n\r\n")
                request = Request(head.decode("latin-1"), body)
                length = int(request.header("Content-Length") or 0)
                while len(request.body) < length:
                    chunk = sock.recv(65536)
                    if not chunk:
                        return
                    request.body += chunk
                receiver.requests.append(request)
                with suppress(OSError):  # the client went away: what a deadline does
                    receiver.answer(request, sock)

        socketserver.ThreadingTCPServer.allow_reuse_address = True
        self.server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def url(self, path: str = "/hook", user: str = "") -> str:
        return f"http://{user}127.0.0.1:{self.port}{path}"

    def stop(self) -> None:
        self.stopping.set()
        self.server.shutdown()
        self.server.server_close()


def status(code: int, reason: str = "OK", extra: str = "") -> Answer:
    def answer(request: Request, sock: socket.socket) -> None:
        sock.sendall(f"HTTP/1.1 {code} {reason}\r\nContent-Length: 0\r\n{extra}\r\n".encode())

    return answer


def slow(seconds: float, code: int = 204) -> Answer:
    def answer(request: Request, sock: socket.socket) -> None:
        time.sleep(seconds)
        sock.sendall(f"HTTP/1.1 {code} Fine\r\nContent-Length: 0\r\n\r\n".encode())

    return answer


def endless_body(stop: threading.Event) -> Answer:
    """A 200 whose body never ends (until the client closes or the test stops)."""

    def answer(request: Request, sock: socket.socket) -> None:
        sock.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\n")
        chunk = b"x" * 65536
        while not stop.is_set():
            sock.sendall(chunk)

    return answer


def dribble(stop: threading.Event, every: float = 0.1) -> Answer:
    """A status line, then one header byte every ``every`` seconds, for ever."""

    def answer(request: Request, sock: socket.socket) -> None:
        sock.sendall(b"HTTP/1.1 200 OK\r\nX-Slow: ")
        while not stop.is_set():
            sock.sendall(b"a")
            time.sleep(every)

    return answer


def endless_headers(stop: threading.Event) -> Answer:
    def answer(request: Request, sock: socket.socket) -> None:
        sock.sendall(b"HTTP/1.1 200 OK\r\n")
        while not stop.is_set():
            sock.sendall(b"X-Pad: " + b"y" * 1000 + b"\r\n")

    return answer


def redirect(location: str, code: int = 302) -> Answer:
    return status(code, "Found", f"Location: {location}\r\n")


def hang(stop: threading.Event) -> Answer:
    """Reads the request, then never answers (until the test stops)."""

    def answer(request: Request, sock: socket.socket) -> None:
        stop.wait()

    return answer
