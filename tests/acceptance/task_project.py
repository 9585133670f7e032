"""A throwaway project whose GafferTasks write effects, for real-worker acceptance tests."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import text

from celery_gaffer.settings import parse_database_url
from celery_gaffer.store import get_engine

PROJECT = """
import os
import time

from celery import Celery
from sqlalchemy import Integer, String, select
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

import celery_gaffer
from celery_gaffer import GafferTask, LeaseHeld

app = Celery("tproj", broker={broker!r})
app.conf.gaffer_database_url = {database!r}
app.conf.gaffer_lease_ttl = 3
app.conf.broker_connection_retry_on_startup = True
app.conf.worker_prefetch_multiplier = 1
app.conf.broker_transport_options = {{
    "visibility_timeout": 8,
    "unacked_restore_interval": 1,
    "unacked_restore_throttle": 1,
    # kombu's restore takes a Redis lock for up to this long; a worker killed while it
    # holds it (300 s by default) would delay every redelivery past the tests' waits.
    "unacked_mutex_expire": 5,
}}
celery_gaffer.install(app)


class Base(DeclarativeBase):
    pass


class Effect(Base):
    __tablename__ = "test_effects"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    label: Mapped[str] = mapped_column(String(200))
    writer: Mapped[str] = mapped_column(String(50))
    fence: Mapped[int | None] = mapped_column(Integer, nullable=True)


class Item(Base):
    __tablename__ = "test_items"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    handled: Mapped[int] = mapped_column(Integer, default=0)


@app.task(
    base=GafferTask, bind=True, name="tproj.settle", gaffer_key="invoice.settled:{{invoice_id}}"
)
def settle(self, invoice_id, pause=0.0):
    with self.session() as s:
        s.add(Effect(label=f"settled {{invoice_id}}", writer=str(os.getpid())))
        s.flush()
        time.sleep(pause)


@app.task(base=GafferTask, bind=True, name="tproj.fire")
def fire(self, pause=0.0):
    with self.session() as s:
        s.add(Effect(label=self.request.gaffer_key, writer=str(os.getpid())))
        s.flush()
        time.sleep(pause)


@app.task(base=GafferTask, bind=True, name="tproj.fenced_writer")
def fenced_writer(self, writer, count, interval, ttl, wait_for_lease=0.0):
    deadline = time.monotonic() + wait_for_lease
    while True:
        try:
            holder = self.lease("shared", ttl=ttl)
            lease = holder.__enter__()
            break
        except LeaseHeld:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)
    try:
        for i in range(count):
            with self.session() as s:
                s.add(Effect(label=f"{{writer}}-{{i}}", writer=writer, fence=lease.fence))
            time.sleep(interval)
    finally:
        holder.__exit__(None, None, None)


def _fetch(session, after, limit):
    query = select(Item).order_by(Item.id).limit(limit)
    if after is not None:
        query = query.where(Item.id > after)
    return list(session.scalars(query))


def _handle(session, item):
    item.handled += 1


@app.task(base=GafferTask, bind=True, name="tproj.batch", gaffer_key="batch:{{run}}")
def batch(self, run, batch_size=1000, deadline=None):
    report = self.run_batches(
        "items", _fetch, _handle, key=lambda item: item.id, batch_size=batch_size, deadline=deadline
    )
    return {{"processed": report.processed, "caught_up": report.caught_up}}
"""


def write_task_project(directory: Path, broker: str, database: str) -> str:
    """Write ``tproj.py``, and create empty effect and item tables."""
    url = parse_database_url(database)
    (directory / "tproj.py").write_text(PROJECT.format(broker=broker, database=database))
    with get_engine(url).begin() as conn:
        conn.execute(text("DROP TABLE IF EXISTS test_effects"))
        conn.execute(text("DROP TABLE IF EXISTS test_items"))
        serial = "SERIAL" if url.get_backend_name() == "postgresql" else "INTEGER"
        conn.execute(
            text(
                f"CREATE TABLE test_effects (id {serial} PRIMARY KEY, label VARCHAR(200) NOT NULL, "
                "writer VARCHAR(50) NOT NULL, fence INTEGER)"
            )
        )
        conn.execute(
            text("CREATE TABLE test_items (id INTEGER PRIMARY KEY, handled INTEGER NOT NULL)")
        )
    return "tproj"


def effect_rows(database: str) -> list[tuple[str, str, int | None]]:
    with get_engine(parse_database_url(database)).connect() as conn:
        rows = conn.execute(text("SELECT label, writer, fence FROM test_effects ORDER BY id"))
        return [(row[0], row[1], row[2]) for row in rows]
