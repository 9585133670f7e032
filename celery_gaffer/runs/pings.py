"""Per-schedule ping URLs, healthchecks.io style: ``<url>/start`` when a fire's run
starts, ``<url>`` when it succeeds, ``<url>/fail`` when it fails.

An external monitor that expects these pings notices a job that stopped running even
when every Beat and worker is down, which no check inside the system can. A run never
waits for a ping: it is queued, and sent by a daemon thread of this process for the
monitor's origin (scheme, host and port), in order, so that a monitor that hangs delays
only its own pings. Each attempt has a total deadline and follows no redirect
(:func:`celery_gaffer.outbound.deliver`); a ping is tried three times (1 s, then 5 s
apart) and then given up with one WARNING line. A ping still queued when the process
exits is lost (the monitor then sees a late or missing ping, which is what it is for).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
import uuid
from dataclasses import dataclass, field
from urllib.parse import urlsplit, urlunsplit

from ..exceptions import one_line
from ..outbound import DeliveryFailed, deliver
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
#: Seconds one attempt may take in all (connect, send and read).
TIMEOUT = 5.0
RETRY_DELAYS = (1.0, 5.0)
#: Most pings waiting for one origin; more are dropped with a WARNING line.
QUEUE_LIMIT = 1000
#: Most origins with a thread of their own; pings to further origins share one more.
MAX_LANES = 32
#: A lane's thread ends after this many seconds without a ping (started again on demand).
IDLE_AFTER = 60.0
_SHARED = "*"


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


@dataclass
class _Lane:
    """The pings of one origin: a bounded queue and the thread that sends them."""

    origin: str
    queue: queue.Queue[tuple[str, str, str]] = field(
        default_factory=lambda: queue.Queue(QUEUE_LIMIT)
    )
    thread: threading.Thread | None = None


class Pinger:
    """Sends pings from a daemon thread per monitor origin (see the module's notes)."""

    def __init__(self) -> None:
        self._lanes: dict[str, _Lane] = {}
        self._lock = threading.Lock()

    def send(self, url: str, event: str, run_id: str | None) -> None:
        """Queue the ping of ``event`` (``start``, ``success`` or ``fail``) of ``url``;
        never waits."""
        target = ping_target(url, event, run_id)
        parts = urlsplit(target)
        origin = f"{parts.scheme}://{(parts.hostname or '').lower()}:{parts.port}"
        with self._lock:
            if origin not in self._lanes and len(self._lanes) >= MAX_LANES:
                origin = _SHARED
            lane = self._lanes.get(origin)
            if lane is None:
                lane = self._lanes[origin] = _Lane(origin)
                lane.thread = threading.Thread(
                    target=self._run, args=(lane,), name="gaffer-pinger", daemon=True
                )
                lane.thread.start()
            try:
                lane.queue.put_nowait((url, event, target))
                return
            except queue.Full:
                pass
        logger.warning(
            "ping %s of %s dropped: %d pings to its monitor are waiting already",
            event,
            masked_ping_url(url),
            QUEUE_LIMIT,
            extra={"action": "ping_dropped"},
        )

    def _run(self, lane: _Lane) -> None:
        while True:
            try:
                url, event, target = lane.queue.get(timeout=IDLE_AFTER)
            except queue.Empty:
                with self._lock:  # send() queues under the lock: nothing is missed
                    if lane.queue.empty():
                        del self._lanes[lane.origin]
                        return
                continue
            try:
                self._deliver(url, event, target)
            except Exception as exc:  # noqa: BLE001 - a lane's thread must outlive any ping
                logger.warning(
                    "ping %s of %s failed: %s",
                    event,
                    masked_ping_url(url),
                    one_line(exc),
                    extra={"action": "ping_failed"},
                )
            finally:
                lane.queue.task_done()

    def join(self) -> None:
        """Wait until every queued ping was sent or given up (for tests and shutdown)."""
        with self._lock:
            lanes = list(self._lanes.values())
        for lane in lanes:
            lane.queue.join()

    def _deliver(self, url: str, event: str, target: str) -> None:
        error: Exception | None = None
        for delay in (0.0, *RETRY_DELAYS):
            if delay:
                time.sleep(delay)
            try:
                deliver("GET", target, timeout=TIMEOUT)
                return
            except DeliveryFailed as exc:
                error = exc
        logger.warning(
            "ping %s of %s failed %d times; given up: %s",
            event,
            masked_ping_url(url),
            1 + len(RETRY_DELAYS),
            error,
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
