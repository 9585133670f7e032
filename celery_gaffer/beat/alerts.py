"""Push alerts: POST each health change to ``gaffer_alert_webhook_url``.

:mod:`.health` writes each change's alert (:func:`.health.alert_body`) to the outbox
(``{prefix}alerts``) in the transaction of the change; :func:`send_due` runs on Beat's
health tick and POSTs the due alerts, one claim at a time, with a short timeout and a
bounded number per tick. A failed POST (an HTTP error status, a refused connection, a
timeout) is retried with exponential backoff from 5 s to 10 min, and given up after a
day with one ERROR line. Delivery is at least once: receivers deduplicate with
``alert_id``. See docs/how-to/alerting.md.
"""

from __future__ import annotations

import base64
import http.client
import json
import logging
import urllib.request
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import unquote, urlsplit, urlunsplit

from ..exceptions import one_line
from ..settings import GafferSettings
from ..store import alerts as outbox
from ..store.database import Database

logger = logging.getLogger("celery_gaffer.alerts")

#: Seconds one POST may take before it counts as failed.
TIMEOUT = 5.0
#: Most alerts sent per tick (a tick stops at the first failure, so it waits at most
#: one TIMEOUT for a receiver that is down).
MAX_SENDS = 20
FIRST_RETRY = 5.0
MAX_RETRY = 600.0
GIVE_UP_AFTER = timedelta(hours=24)
# How long a claimed alert is held from other Beats: longer than a send can take.
HOLD = timedelta(seconds=60)


def _iso(moment: datetime | None) -> str | None:
    return None if moment is None else moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def retry_delay(attempts: int) -> timedelta:
    """5 s after the first failed attempt, doubling, at most 10 min."""
    return timedelta(seconds=min(FIRST_RETRY * 2 ** min(max(0, attempts - 1), 30), MAX_RETRY))


def post(url: str, body: dict[str, Any], timeout: float = TIMEOUT) -> None:
    """POST ``body`` as JSON; raise on anything but a 2xx answer. A user-info in the URL
    is sent as HTTP Basic authentication."""
    parts = urlsplit(url)
    headers = {"Content-Type": "application/json", "User-Agent": "celery-gaffer"}
    if parts.username is not None:
        credentials = f"{unquote(parts.username)}:{unquote(parts.password or '')}"
        headers["Authorization"] = "Basic " + base64.b64encode(credentials.encode()).decode()
        host = parts.hostname or ""
        netloc = f"[{host}]" if ":" in host else host
        if parts.port is not None:
            netloc += f":{parts.port}"
        url = urlunsplit(parts._replace(netloc=netloc))
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers=headers, method="POST"
    )
    with urllib.request.urlopen(request, timeout=timeout) as response:
        response.read()


def send_due(
    database: Database, settings: GafferSettings, clock: Callable[[], datetime]
) -> datetime | None:
    """Send the due alerts (at most :data:`MAX_SENDS`, stopping at the first failure);
    when the earliest unsent one is next due (None: none is waiting)."""
    url = settings.alert_webhook_url
    if url is None:
        return None
    models = database.models
    for _ in range(MAX_SENDS):
        now = clock()
        with database.begin() as conn:
            alert = outbox.claim_alert(conn, models, now, HOLD)
        if alert is None:
            break
        try:
            post(url, alert.body)
        except (OSError, ValueError, http.client.HTTPException) as exc:
            if not _failed(database, settings, alert, exc, clock()):
                break
            continue
        with database.begin() as conn:
            outbox.mark_sent(conn, models, alert.id, clock())
    with database.read() as conn:
        return outbox.next_attempt(conn, models)


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
    logger.warning(
        "alert of schedule %s not delivered to %s (attempt %d, retried at %s): %s",
        alert.schedule,
        target,
        alert.attempts,
        _iso(retry_at),
        error,
        extra={"action": "alert_failed", "schedule": alert.schedule},
    )
    return False
