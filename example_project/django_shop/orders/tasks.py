"""The shop's jobs: shipping an order once however often it is delivered, and the nightly
expiry of unpaid orders in fenced, resumable batches. Both write with the Django ORM."""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

from celery import shared_task
from django.db import transaction
from django.utils import timezone

from celery_gaffer import GafferTask

from .models import Order, Shipment

logger = logging.getLogger(__name__)


@shared_task(base=GafferTask, bind=True, gaffer_key="order.shipped:{order_id}")
def ship_order(self: GafferTask, order_id: int) -> str:
    """Ship one order: once, however often the message is delivered.

    The order's update, the shipment row and the key ``order.shipped:<id>`` commit in one
    transaction: a second delivery finds the key taken, writes nothing and is recorded
    ``duplicate``.
    """
    with self.atomic():
        order = Order.objects.select_for_update().get(pk=order_id)
        order.status = Order.Status.SHIPPED
        order.save(update_fields=["status"])
        Shipment.objects.create(order=order, task_id=self.request.id)
        # Runs after the sealed commit only; never when the block is rolled back.
        transaction.on_commit(lambda: logger.info("order %s shipped", order_id))
    return f"shipped order {order_id}"


def _unpaid_before(cutoff: Any) -> Any:
    def fetch(after: int | None, limit: int) -> list[Order]:
        rows = Order.objects.filter(status=Order.Status.UNPAID, created_at__lt=cutoff)
        if after is not None:
            rows = rows.filter(pk__gt=after)
        return list(rows.order_by("pk")[:limit])

    return fetch


def _cancel(order: Order) -> None:
    order.status = Order.Status.CANCELLED
    order.save(update_fields=["status"])


@shared_task(base=GafferTask, bind=True, gaffer_overlap="forbid")
def expire_unpaid_orders(self: GafferTask, days: int = 7) -> dict[str, Any]:
    """Cancel the orders left unpaid for ``days`` days, 200 at a time.

    Each batch is one fenced Django transaction that also saves the cursor, so a run
    killed half-way is resumed by the next one from its last committed batch.
    """
    report = self.run_batches(
        "expire-unpaid-orders",
        _unpaid_before(timezone.now() - timedelta(days=days)),
        _cancel,
        key=lambda order: order.pk,
        batch_size=200,
        orm="django",
    )
    return {"cancelled": report.processed, "caught_up": report.caught_up}
