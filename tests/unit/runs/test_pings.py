"""Ping URLs: the URL of each event, masking, validation, and the sending thread
against a real local HTTP server."""

from __future__ import annotations

import logging
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from celery_gaffer import InvalidInput
from celery_gaffer.runs import pings
from celery_gaffer.runs.pings import Pinger, ping_target
from celery_gaffer.schedules.spec import validate_policy
from celery_gaffer.settings import masked_ping_url

RID = "6f1c1d2e-8a0b-4c1e-9d6f-1a2b3c4d5e6f"


def test_each_event_has_its_healthchecks_suffix_and_a_uuid_run_id() -> None:
    url = "https://hc-ping.com/abc-123"
    assert ping_target(url, "start", RID) == f"https://hc-ping.com/abc-123/start?rid={RID}"
    assert ping_target(url, "success", RID) == f"https://hc-ping.com/abc-123?rid={RID}"
    assert ping_target(url + "/", "fail", None) == "https://hc-ping.com/abc-123/fail"
    assert ping_target(url + "?x=1", "fail", "not-a-uuid") == "https://hc-ping.com/abc-123/fail?x=1"


def test_a_ping_url_is_shown_without_its_path() -> None:
    assert masked_ping_url("https://hc-ping.com/secret-uuid?k=v") == "https://hc-ping.com/***"
    assert masked_ping_url("http://127.0.0.1:8000/x") == "http://127.0.0.1:8000/***"
    assert masked_ping_url("http://host:port/x") == "***"


@pytest.mark.parametrize(
    "value",
    [
        "ftp://example.com/x",
        "https://",
        "https://exa mple.com/x",
        42,
        "https://h/" + "x" * 2048,
        "http://[abc/x",
        "http://h:99999/x",
        "http://:80/x",
    ],
)
def test_a_bad_ping_url_names_its_field(value: Any) -> None:
    with pytest.raises(InvalidInput) as caught:
        validate_policy({"ping_url": value})
    assert caught.value.field == "gaffer.ping_url"


class Server:
    def __init__(self, failures: int) -> None:
        self.paths: list[str] = []
        server = self
        self.failures = failures

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                server.paths.append(self.path)
                failed = server.failures > 0
                server.failures -= int(failed)
                self.send_response(503 if failed else 200)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                return None

        self.http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.http.server_address[1]}/check-secret"
        threading.Thread(target=self.http.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self.http.shutdown()
        self.http.server_close()


def test_pings_are_sent_in_order_retried_then_given_up_with_one_line(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(pings, "RETRY_DELAYS", (0.0, 0.0))
    server = Server(failures=1)
    try:
        pinger = Pinger()
        pinger.send(server.url, "start", RID)
        pinger.send(server.url, "success", RID)
        pinger.join()
        assert server.paths == [
            f"/check-secret/start?rid={RID}",  # 503: tried again
            f"/check-secret/start?rid={RID}",
            f"/check-secret?rid={RID}",
        ]
        server.failures = 10
        with caplog.at_level(logging.WARNING, logger="celery_gaffer.pings"):
            pinger.send(server.url, "fail", RID)
            pinger.join()
    finally:
        server.stop()
    assert len(server.paths) == 6  # three tries of the fail ping
    [record] = caplog.records
    assert "given up" in record.getMessage()
    assert "check-secret" not in record.getMessage()
