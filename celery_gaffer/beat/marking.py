"""Recording in the ledger what reached the broker: the fires sent are marked ``sent``.

A fire not marked stays ``pending`` and is published again by any Beat after
``gaffer_republish_after`` (its idempotency key makes the repeat harmless), so marking
follows publishing and never precedes it.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from ..clock import Clock
from ..store import Database
from ..store.fires import Fire, mark_sent
from ..store.schedules import Payload
from .publisher import Published, send


def publish(
    app: Any,
    database: Database,
    fires: Sequence[Fire],
    payloads: dict[str, Payload],
    producer: Any,
    clock: Clock,
) -> Published:
    """Send each fire (:func:`.publisher.send`), then mark the sent ones ``sent``."""
    outcome = send(app, fires, payloads, producer)
    mark(database, outcome.sent, clock)
    return outcome


def mark(database: Database, sent: Sequence[Fire], clock: Clock) -> None:
    """Mark fires just sent ``sent`` (with delivery confirmation, due to be confirmed
    from now)."""
    if sent:
        mark_groups(database, [(clock(), sent)])


def mark_groups(database: Database, groups: Sequence[tuple[datetime, Sequence[Fire]]]) -> None:
    """Mark fires ``sent`` in one transaction, each group at the time it was sent."""
    confirm_after = database.settings.confirm_delivery_after
    with database.begin() as conn:
        for at, fires in groups:
            confirm_at = None if confirm_after is None else at + timedelta(seconds=confirm_after)
            mark_sent(conn, database.models, (fire.id for fire in fires), at, confirm_at)
