"""The jobs: settling invoices (keyed), a fenced batch reconciliation, a fenced month-end
close, idempotent reminders, and a few plain scheduled reports."""

from __future__ import annotations

import json
import os
import time
from datetime import date, datetime, timezone
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from celery_gaffer import GafferTask

from .celery_app import VAR, app
from .models import Invoice, MonthTotal, Payment

OUTBOX = VAR / "outbox.jsonl"
# How long fetching the bank's statement takes in the demo, so that a second trigger
# arrives while the first run is still going.
STATEMENT_SECONDS = 5.0 if os.environ.get("BILLING_DEMO") else 0.0


@app.task(base=GafferTask, bind=True, gaffer_key="invoice.settled:{invoice_id}")
def settle(self: GafferTask, invoice_id: int) -> str:
    """Settle one invoice and record its payment, once however often it is delivered."""
    with self.session() as s:  # fenced; completes the key in the same transaction
        invoice = s.get(Invoice, invoice_id)
        if invoice is None:
            return f"no invoice {invoice_id}"
        invoice.status = "settled"
        s.add(Payment(invoice_id=invoice_id, amount=invoice.amount, task_id=self.request.id))
    return f"settled invoice {invoice_id}"


def _due_unsettled(session: Session, after: int | None, limit: int) -> list[Invoice]:
    query = (
        select(Invoice)
        .where(Invoice.status == "open", Invoice.due_on <= date.today())
        .order_by(Invoice.id)
        .limit(limit)
    )
    if after is not None:
        query = query.where(Invoice.id > after)
    return list(session.scalars(query))


def _settle_due(session: Session, invoice: Invoice) -> None:
    invoice.status = "settled"


@app.task(base=GafferTask, bind=True, gaffer_overlap="forbid")
def reconcile(self: GafferTask) -> dict[str, Any]:
    """Fetch the bank's statement, then settle the invoices that have fallen due, in
    bounded, fenced, resumable batches.

    One cursor over the growing invoice table: a run goes on from the last invoice the
    previous run settled, so each run reports only what it settled itself.
    """
    time.sleep(STATEMENT_SECONDS)  # outside any transaction: the write lock stays free
    report = self.run_batches(
        "reconciliation", _due_unsettled, _settle_due, key=lambda inv: inv.id, batch_size=25
    )
    return {"settled": report.processed, "caught_up": report.caught_up}


@app.task(base=GafferTask, bind=True)
def close_month(self: GafferTask, month: str, work_seconds: float = 0.0) -> str:
    """Write the month's settled total under the fenced lease ``close:MONTH``.

    Whoever held the lease before this run can no longer commit a total: its fence is
    stale, and its commit is rolled back with ``FenceLost``.
    """
    with self.lease(f"close:{month}", ttl=3) as lease:
        fence = lease.fence
        time.sleep(work_seconds)  # the slow part (rendering statements), outside any transaction
        with self.session() as s:  # fenced: refused with FenceLost once the lease is lost
            settled = s.scalar(
                select(func.coalesce(func.sum(Invoice.amount), 0)).where(
                    Invoice.status == "settled"
                )
            )
            s.merge(
                MonthTotal(
                    month=month,
                    settled=settled,
                    task_id=self.request.id,
                    fence=fence,
                    written_at=datetime.now(timezone.utc).replace(tzinfo=None),
                )
            )
    return f"closed {month} at fence {fence}"


@app.task(base=GafferTask, bind=True, gaffer_key="reminder:{invoice_id}:{day}")
def send_reminder(self: GafferTask, invoice_id: int, day: str) -> str:
    """E-mail one reminder per invoice and day, however often it is delivered."""
    with self.session() as s:
        invoice = s.get(Invoice, invoice_id)
        customer = invoice.customer if invoice else "?"
    # The key was completed with the session's commit: a second delivery stops before here.
    with OUTBOX.open("a") as outbox:
        outbox.write(json.dumps({"to": customer, "invoice": invoice_id, "day": day}) + "\n")
    return customer


@app.task(bind=True)
def remind_overdue(self: Any) -> int:
    """Fan out one idempotent reminder per overdue open invoice."""
    from celery_gaffer.store import database_for

    today = date.today().isoformat()
    with database_for(app).session() as s:
        overdue = s.scalars(
            select(Invoice.id).where(Invoice.status == "open", Invoice.due_on < date.today())
        ).all()
    for invoice_id in overdue:
        send_reminder.delay(invoice_id, today)
    return len(overdue)


@app.task(bind=True)
def import_bank_feed(self: Any) -> str:
    """Fetch the bank's latest statement lines (the demo's every-second schedule)."""
    return f"bank feed for {self.request.gaffer_nominal_at}"


@app.task(bind=True)
def export_to_accounting(self: Any) -> str:
    """Push the day's journal to the accounting system (on the ``accounting`` queue)."""
    return f"export for {self.request.gaffer_nominal_at}"


@app.task(bind=True)
def hourly_report(self: Any) -> str:
    """Europe/London, every hour on the hour."""
    return f"report at {datetime.now(timezone.utc):%H:%M:%SZ} for {self.request.gaffer_nominal_at}"


@app.task(bind=True)
def morning_digest(self: Any) -> str:
    """09:00 in New York, whatever the season."""
    return f"digest for {self.request.gaffer_nominal_at}"
