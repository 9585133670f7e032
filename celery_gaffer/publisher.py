"""Publishing fires to the broker, after the ledger transaction has committed."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from .clock import Clock
from .ledger import Fire, Payload, mark_sent
from .store import Database

logger = logging.getLogger("celery_gaffer.publisher")

# Celery's own header marking a Beat send, which its signal handlers recognise.
BEAT_HEADER = "celery_beat_task"


def fire_headers(fire: Fire, payload: Payload) -> dict[str, Any]:
    """The message headers of a fire (DESIGN.md: gaffer_schedule / _nominal_at / _key).

    ``gaffer_overlap`` carries the schedule's overlap policy to the task when it is not
    ``allow``.
    """
    headers: dict[str, Any] = {
        BEAT_HEADER: True,
        "gaffer_schedule": fire.schedule,
        "gaffer_nominal_at": fire.nominal_at.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "gaffer_key": fire.key,
    }
    if payload.overlap != "allow":
        headers["gaffer_overlap"] = payload.overlap
    return headers


def publish(
    app: Any,
    database: Database,
    fires: Sequence[Fire],
    payloads: dict[str, Payload],
    producer: Any,
    clock: Clock,
) -> list[Fire]:
    """Send each fire with its deterministic task id, then mark the sent ones ``sent``.

    A fire whose send fails stays ``pending`` and is published again by any Beat after
    ``gaffer_republish_after``; the task's idempotency makes a repeat harmless.
    """
    sent: list[Fire] = []
    for fire in fires:
        payload = payloads[fire.schedule]
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
            continue
        sent.append(fire)
        logger.info(
            "sent %s (%s) task id %s",
            fire.key,
            payload.task,
            fire.task_id,
            extra={
                "action": "fire_republished" if fire.publish_count > 1 else "fire_sent",
                "key": fire.key,
                "schedule": fire.schedule,
                "task_id": fire.task_id,
            },
        )
    if sent:
        now = clock()
        confirm_after = database.settings.confirm_delivery_after
        confirm_at = None if confirm_after is None else now + timedelta(seconds=confirm_after)
        with database.begin() as conn:
            mark_sent(conn, database.models, (fire.id for fire in sent), now, confirm_at)
    return sent
