"""Push alerts: POST each health change to ``gaffer_alert_webhook_url``.

:mod:`.health` writes each change's alert (:func:`.health.alert_body`) to the outbox
(``{prefix}alerts``) in the transaction of the change; :class:`AlertDelivery` POSTs the
due alerts, one claim at a time, from a thread of its own (:mod:`.side`) that the tick
wakes when it wrote new ones, so a slow, endless or redirecting receiver never holds the
tick. Each POST goes through :func:`celery_gaffer.outbound.deliver`: a total deadline,
a small read, no redirect followed. A failed POST (an HTTP error status, a redirect, a
refused connection, a timeout) is retried with exponential backoff from 5 s to 10 min,
logged once per reason, and given up after a day with one ERROR line. Delivery is at
least once: receivers deduplicate with ``alert_id``. See docs/how-to/alerting.md.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from typing import Any

from ..exceptions import one_line
from ..outbound import DeliveryFailed, deliver
from ..settings import GafferSettings
from ..store import alerts as outbox
from ..store.database import Database
from .side import SideThread

logger = logging.getLogger("celery_gaffer.alerts")

#: Seconds one POST may take in all (connect, send and read) before it counts as failed.
TIMEOUT = 5.0
#: Most alerts a Beat without a delivery thread sends per tick, and the seconds after
#: which it starts no other (a tick stops at the first failure, too).
MAX_SENDS = 20
TICK_BUDGET = 1.0
FIRST_RETRY = 5.0
MAX_RETRY = 600.0
GIVE_UP_AFTER = timedelta(hours=24)
# How long a claimed alert is held from other Beats: longer than a send can take.
HOLD = timedelta(seconds=60)
#: How often the delivery thread looks for alerts nobody woke it for (those of a Beat
#: that died before sending them: their claim runs out after HOLD).
POLL = 60.0
#: The delivery thread's shortest sleep (an alert still due is another Beat's, claimed
#: and not yet committed).
PAUSE = 0.1


def _iso(moment: datetime | None) -> str | None:
    return None if moment is None else moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def retry_delay(attempts: int) -> timedelta:
    """5 s after the first failed attempt, doubling, at most 10 min."""
    return timedelta(seconds=min(FIRST_RETRY * 2 ** min(max(0, attempts - 1), 30), MAX_RETRY))


def post(url: str, body: dict[str, Any], timeout: float = TIMEOUT) -> None:
    """POST ``body`` as JSON; raise :class:`.DeliveryFailed` on anything but a 2xx answer
    within ``timeout`` seconds. A user-info in the URL is sent as HTTP Basic
    authentication, to that host only."""
    data = json.dumps(body).encode()
    deliver("POST", url, timeout=timeout, body=data, headers={"Content-Type": "application/json"})


def send_due(
    database: Database,
    settings: GafferSettings,
    clock: Callable[[], datetime],
    *,
    budget: float | None = None,
    stopping: Callable[[], bool] = lambda: False,
) -> datetime | None:
    """Send the due alerts until none is due, ``stopping()``, or the first failure that
    was not given up; with a ``budget`` (on the tick), also after :data:`MAX_SENDS` or
    once ``budget`` seconds have passed. When the earliest unsent one is next due (None:
    none waits)."""
    url = settings.alert_webhook_url
    if url is None:
        return None
    models = database.models
    started = time.monotonic()
    sends = 0
    while not stopping():
        if budget is not None and (sends >= MAX_SENDS or time.monotonic() - started > budget):
            break
        sends += 1
        now = clock()
        with database.begin() as conn:
            alert = outbox.claim_alert(conn, models, now, HOLD)
        if alert is None:
            break
        try:
            post(url, alert.body)
        except DeliveryFailed as exc:
            # A receiver that failed one alert would most likely fail the next one too:
            # the pass ends here and the next starts at the earliest retry.
            if not _failed(database, settings, alert, exc, clock()):
                break
            continue
        with database.begin() as conn:
            outbox.mark_sent(conn, models, alert.id, clock())
    with database.read() as conn:
        return outbox.next_attempt(conn, models)


class AlertDelivery:
    """Sends the outbox of one Beat: from a thread of its own once :meth:`start` ran
    (the tick only wakes it), else from the tick, within :data:`TICK_BUDGET` (a Beat
    driven by an injected clock in tests)."""

    def __init__(self, database: Database, clock: Callable[[], datetime]) -> None:
        self.database = database
        self.clock = clock
        self.thread: SideThread | None = None
        #: Without a thread: when an unsent alert is next due (None: none waiting);
        #: unknown at start, so the first tick looks.
        self._at: datetime | None = datetime(1970, 1, 1, tzinfo=timezone.utc)

    @property
    def enabled(self) -> bool:
        return self.database.settings.alert_webhook_url is not None

    def start(self) -> None:
        """Deliver from a thread of its own from now on (nothing without a webhook)."""
        if self.enabled and self.thread is None:
            self.thread = SideThread(
                "gaffer-alerts", self._deliver, retry=FIRST_RETRY, action="alerts_not_sent"
            )
            self.thread.start()

    def stop(self) -> None:
        """Stop the thread without waiting for a POST under way (it is sent again later
        if its end was not recorded: at least once)."""
        if self.thread is not None:
            self.thread.stop()
            self.thread = None

    def due(self, now: datetime) -> bool:
        """Whether the tick has alerts to send (never, with a thread)."""
        return self.thread is None and self._at is not None and self._at <= now

    def wait_in(self, now: datetime) -> float | None:
        """Seconds until the tick has alerts to send (None: never, with a thread)."""
        if self.thread is not None or self._at is None or not self.enabled:
            return None
        return (self._at - now).total_seconds()

    def health_checked(self, changed: bool) -> None:
        """After the tick committed health checks (``changed``: some alert may be new):
        wake the thread, or send the due alerts here."""
        if self.thread is not None:
            if changed:
                self.thread.wake()
            return
        self._at = send_due(self.database, self.database.settings, self.clock, budget=TICK_BUDGET)

    def _deliver(self) -> float:
        thread = self.thread
        due_at = send_due(
            self.database,
            self.database.settings,
            self.clock,
            stopping=lambda: thread is None or thread.stopping,
        )
        if due_at is None:
            return POLL
        return min(POLL, max(PAUSE, (due_at - self.clock()).total_seconds()))


def _failed(
    database: Database,
    settings: GafferSettings,
    alert: outbox.Alert,
    exc: Exception,
    now: datetime,
) -> bool:
    """Record a failed POST; True when the alert was given up (keep sending others)."""
    error = one_line(exc)
    give_up = now - alert.created_at >= GIVE_UP_AFTER
    retry_at = None if give_up else now + retry_delay(alert.attempts)
    with database.begin() as conn:
        outbox.mark_failed(conn, database.models, alert.id, error, retry_at)
    target = settings.masked_alert_webhook_url
    # Logged once per reason: a receiver down for a day would otherwise fill the log.
    repeated = alert.attempts > 1 and error == alert.last_error
    if give_up:
        logger.error(
            "alert %s of schedule %s not delivered to %s after %d attempts; giving up: %s",
            alert.body.get("alert_id"),
            alert.schedule,
            target,
            alert.attempts,
            error,
            extra={"action": "alert_given_up", "schedule": alert.schedule},
        )
        return True
    logger.log(
        logging.DEBUG if repeated else logging.WARNING,
        "alert of schedule %s not delivered to %s (attempt %d, retried at %s): %s",
        alert.schedule,
        target,
        alert.attempts,
        _iso(retry_at),
        error,
        extra={"action": "alert_failed", "schedule": alert.schedule},
    )
    return False
