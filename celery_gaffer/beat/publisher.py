"""Publishing fires to the broker, after the ledger transaction has committed."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from contextlib import nullcontext
from datetime import timedelta
from typing import Any

from ..clock import Clock
from ..protocol import FireHeaders
from ..store import Database
from ..store.fires import Fire, mark_sent
from ..store.schedules import Payload

logger = logging.getLogger("celery_gaffer.publisher")

# Fires sent per broker batch (kombu's ``Producer.batch``): one round trip each on Redis,
# and the most whose delivery one failed flush leaves uncertain.
PUBLISH_BATCH = 250
# Broker operations a batch may buffer before kombu flushes it early (a queue with
# ``x-expires`` adds operations per message); above any batch this module makes.
BATCH_OPERATIONS = 10_000


def fire_headers(fire: Fire, payload: Payload) -> dict[str, Any]:
    """The message headers of a fire (see :class:`~celery_gaffer.protocol.FireHeaders`).

    ``gaffer_overlap`` carries the schedule's overlap policy to the task when it is not
    ``allow``.
    """
    headers = FireHeaders.for_fire(fire.schedule, fire.nominal_at, fire.key, payload.overlap)
    return headers.as_headers()


def publish(
    app: Any,
    database: Database,
    fires: Sequence[Fire],
    payloads: dict[str, Payload],
    producer: Any,
    clock: Clock,
) -> list[Fire]:
    """Send each fire with its deterministic task id, then mark the sent ones ``sent``.

    Sends go through one producer, in kombu's publish batches where the transport has
    them (Redis: one pipeline round trip per :data:`PUBLISH_BATCH` messages). A fire
    whose send fails, or whose batch's flush fails (its delivery is then uncertain),
    stays ``pending`` and is published again by any Beat after
    ``gaffer_republish_after``; the ledger records the repeat as a republish and the
    task's idempotency key makes it harmless.
    """
    sent: list[Fire] = []
    for start in range(0, len(fires), PUBLISH_BATCH):
        sent.extend(_send_batch(app, fires[start : start + PUBLISH_BATCH], payloads, producer))
    if sent:
        now = clock()
        confirm_after = database.settings.confirm_delivery_after
        confirm_at = None if confirm_after is None else now + timedelta(seconds=confirm_after)
        with database.begin() as conn:
            mark_sent(conn, database.models, (fire.id for fire in sent), now, confirm_at)
    return sent


def _send_batch(
    app: Any, fires: Sequence[Fire], payloads: dict[str, Payload], producer: Any
) -> list[Fire]:
    """Send ``fires``; return those that reached the broker (as far as it said)."""
    batch = getattr(producer, "batch", None)  # kombu >= 5.7
    sent: list[Fire] = []
    try:
        with batch(max_size=BATCH_OPERATIONS) if batch is not None else nullcontext():
            for fire in fires:
                if _send(app, fire, payloads[fire.schedule], producer):
                    sent.append(fire)
    except Exception as exc:  # noqa: BLE001 - the flush failed: every send is uncertain
        logger.error(
            "could not publish %d fires (%s: %s); they stay pending and will be republished",
            len(sent),
            type(exc).__name__,
            exc,
            extra={"action": "publish_failed", "count": len(sent)},
        )
        return []
    for fire in sent:
        logger.info(
            "sent %s (%s) task id %s",
            fire.key,
            payloads[fire.schedule].task,
            fire.task_id,
            extra={
                "action": "fire_republished" if fire.publish_count > 1 else "fire_sent",
                "key": fire.key,
                "schedule": fire.schedule,
                "task_id": fire.task_id,
            },
        )
    return sent


def _send(app: Any, fire: Fire, payload: Payload, producer: Any) -> bool:
    options = dict(payload.options)
    headers = {**(options.pop("headers", None) or {}), **fire_headers(fire, payload)}
    try:
        app.send_task(
            payload.task,
            args=payload.args,
            kwargs=payload.kwargs,
            task_id=fire.task_id,
            producer=producer,
            headers=headers,
            **options,
        )
    except Exception:
        logger.exception(
            "could not publish fire %s; it stays pending and will be republished",
            fire.key,
            extra={"action": "publish_failed", "key": fire.key, "schedule": fire.schedule},
        )
        return False
    return True
