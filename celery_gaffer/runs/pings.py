"""Per-schedule ping URLs, healthchecks.io style: ``<url>/start`` when a fire's run
starts, ``<url>`` when it succeeds, ``<url>/fail`` when it fails.

An external monitor that expects these pings notices a job that stopped running even
when every Beat and worker is down, which no check inside the system can. Pings are
sent by one daemon thread per process, in order, so that a slow monitor never delays a
run; each is tried three times (1 s, then 5 s apart) and then given up with one WARNING
line. A ping still queued when the process exits is lost (the monitor then sees a late
or missing ping, which is what it is for).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
import urllib.request
import uuid
from urllib.parse import urlsplit, urlunsplit

from ..protocol import RunState
from ..runtime import runtime
from ..settings import masked_ping_url

logger = logging.getLogger("celery_gaffer.pings")

#: Suffix of each event's URL (healthchecks.io's; Cronitor and others accept the same).
SUFFIXES = {"start": "/start", "success": "", "fail": "/fail"}
#: The ping sent at the end of a run, by its outcome (a retrying run pings on its last try).
END_EVENTS: dict[str, str] = {
    RunState.SUCCEEDED: "success",
    RunState.SKIPPED: "success",
    RunState.DUPLICATE: "success",
    RunState.FAILED: "fail",
    RunState.FENCE_LOST: "fail",
    RunState.REVOKED: "fail",
    RunState.LOST: "fail",
}
TIMEOUT = 10.0
RETRY_DELAYS = (1.0, 5.0)
QUEUE_LIMIT = 10_000


def ping_target(url: str, event: str, run_id: str | None) -> str:
    """The URL of ``event`` for the ping URL ``url``; ``rid`` pairs a run's start and
    end (healthchecks.io) when ``run_id`` is a UUID, as Celery's task ids are."""
    parts = urlsplit(url)
    path = parts.path.rstrip("/") + SUFFIXES[event]
    query = parts.query
    if run_id is not None and _is_uuid(run_id):
        query = f"{query}&rid={run_id}" if query else f"rid={run_id}"
    return urlunsplit((parts.scheme, parts.netloc, path, query, ""))


def _is_uuid(text: str) -> bool:
    try:
        uuid.UUID(text)
    except ValueError:
        return False
    return True


class Pinger:
    """Sends pings from a daemon thread, oldest first (see the module's notes)."""

    def __init__(self) -> None:
        self._queue: queue.Queue[tuple[str, str, str]] = queue.Queue(QUEUE_LIMIT)
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def send(self, url: str, event: str, run_id: str | None) -> None:
        """Queue the ping of ``event`` (``start``, ``success`` or ``fail``) of ``url``."""
        try:
            self._queue.put_nowait((url, event, ping_target(url, event, run_id)))
        except queue.Full:
            logger.warning(
                "ping %s of %s dropped: %d pings are waiting already",
                event,
                masked_ping_url(url),
                QUEUE_LIMIT,
                extra={"action": "ping_dropped"},
            )
            return
        if self._thread is None:
            with self._lock:
                if self._thread is None:
                    self._thread = threading.Thread(
                        target=self._run, name="gaffer-pinger", daemon=True
                    )
                    self._thread.start()

    def _run(self) -> None:
        while True:
            url, event, target = self._queue.get()
            try:
                self._deliver(url, event, target)
            finally:
                self._queue.task_done()

    def join(self) -> None:
        """Wait until every queued ping was sent or given up (for tests and shutdown)."""
        self._queue.join()

    def _deliver(self, url: str, event: str, target: str) -> None:
        error: BaseException | None = None
        for delay in (0.0, *RETRY_DELAYS):
            if delay:
                time.sleep(delay)
            try:
                request = urllib.request.Request(
                    target, method="GET", headers={"User-Agent": "celery-gaffer"}
                )
                with urllib.request.urlopen(request, timeout=TIMEOUT) as response:
                    response.read(1024)
                return
            except Exception as exc:  # noqa: BLE001 - any failure: try again, then say so
                error = exc
        reason = " ".join(str(error).split())[:200] if error is not None else "?"
        logger.warning(
            "ping %s of %s failed %d times; given up: %s: %s",
            event,
            masked_ping_url(url),
            1 + len(RETRY_DELAYS),
            type(error).__name__,
            reason.replace(url, masked_ping_url(url)),
            extra={"action": "ping_failed"},
        )


def pinger() -> Pinger:
    """This process's pinger (a forked child gets its own, and its own thread)."""
    return runtime().part("pinger", Pinger)


def ping(url: str | None, event: str, run_id: str | None) -> None:
    """Queue a ping when the run's schedule has a ping URL."""
    if not url:
        return
    try:
        pinger().send(url, event, run_id)
    except ValueError as exc:  # a URL written around the checks (by hand, say)
        logger.warning(
            "ping %s of %s not sent: %s",
            event,
            masked_ping_url(url),
            exc,
            extra={"action": "ping_failed"},
        )


__all__ = ["END_EVENTS", "Pinger", "masked_ping_url", "ping", "ping_target", "pinger"]
