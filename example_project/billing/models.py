"""The project's own tables, kept in the Gaffer database so tasks can fence writes to them."""

from __future__ import annotations

from datetime import date, datetime

from sqlalchemy import Date, DateTime, ForeignKey, Integer, Numeric, String
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column


class Base(DeclarativeBase):
    pass


class Invoice(Base):
    __tablename__ = "billing_invoices"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    customer: Mapped[str] = mapped_column(String(100))
    amount: Mapped[float] = mapped_column(Numeric(10, 2))
    due_on: Mapped[date] = mapped_column(Date)
    status: Mapped[str] = mapped_column(String(10), default="open")


class Payment(Base):
    """One settlement of an invoice: a second row for one invoice would be a double charge."""

    __tablename__ = "billing_payments"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    invoice_id: Mapped[int] = mapped_column(ForeignKey("billing_invoices.id"))
    amount: Mapped[float] = mapped_column(Numeric(10, 2))
    task_id: Mapped[str] = mapped_column(String(64))


class MonthTotal(Base):
    """A month's closing total, written by whoever holds the month's fenced lease."""

    __tablename__ = "billing_month_totals"

    month: Mapped[str] = mapped_column(String(7), primary_key=True)
    settled: Mapped[float] = mapped_column(Numeric(12, 2))
    task_id: Mapped[str] = mapped_column(String(64))
    fence: Mapped[int] = mapped_column(Integer)
    written_at: Mapped[datetime] = mapped_column(DateTime)
