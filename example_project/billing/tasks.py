"""The jobs: a fenced batch reconciliation, idempotent reminders, two zoned reports."""

from __future__ import annotations

import json
from datetime import date, datetime, timezone
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from celery_gaffer import GafferTask

from .celery_app import VAR, app
from .models import Invoice

OUTBOX = VAR / "outbox.jsonl"


def _unsettled(session: Session, after: int | None, limit: int) -> list[Invoice]:
    query = select(Invoice).where(Invoice.status == "open").order_by(Invoice.id).limit(limit)
    if after is not None:
        query = query.where(Invoice.id > after)
    return list(session.scalars(query))


def _settle(session: Session, invoice: Invoice) -> None:
    if invoice.due_on <= date.today():
        invoice.status = "settled"


@app.task(base=GafferTask, bind=True, gaffer_overlap="forbid")
def reconcile(self: GafferTask) -> dict[str, Any]:
    """Settle due invoices in bounded batches, under a fenced lease; resumable.

    Each fire has its own cursor: a redelivery of the same fire (a worker died) resumes
    where the last committed batch ended; the next fire starts from the beginning.
    """
    fire = self.request.gaffer_key or self.request.id
    report = self.run_batches(
        f"reconciliation:{fire}", _unsettled, _settle, key=lambda inv: inv.id, batch_size=50
    )
    return {"processed": report.processed, "caught_up": report.caught_up}


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
def hourly_report(self: Any) -> str:
    """Europe/London, every hour on the hour."""
    return f"report at {datetime.now(timezone.utc):%H:%M:%SZ} for {self.request.gaffer_nominal_at}"


@app.task(bind=True)
def morning_digest(self: Any) -> str:
    """09:00 in New York, whatever the season."""
    return f"digest for {self.request.gaffer_nominal_at}"
