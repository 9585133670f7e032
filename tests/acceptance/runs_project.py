"""A throwaway project with tasks that succeed, fail, retry, sleep and batch."""

from __future__ import annotations

from pathlib import Path

PROJECT = """
import os
import time

from celery import Celery
from sqlalchemy import Integer, select
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

import celery_gaffer
from celery_gaffer import GafferTask

app = Celery("rproj", broker={broker!r})
app.conf.gaffer_database_url = {database!r}
app.conf.gaffer_lease_ttl = 2
app.conf.gaffer_alert_after_failures = 3
app.conf.broker_connection_retry_on_startup = True
app.conf.worker_prefetch_multiplier = 1
app.conf.worker_send_task_events = True
app.conf.task_send_sent_event = True
celery_gaffer.install(app)

FLAG = {flag!r}


class Base(DeclarativeBase):
    pass


class Item(Base):
    __tablename__ = "test_items"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    handled: Mapped[int] = mapped_column(Integer, default=0)


@app.task(base=GafferTask, bind=True, name="rproj.ok", gaffer_key="ok:{{n}}")
def ok(self, n):
    with self.session():
        pass
    return n


@app.task(base=GafferTask, bind=True, name="rproj.boom")
def boom(self):
    raise ValueError("kaboom " * 500)


@app.task(base=GafferTask, bind=True, name="rproj.retry")
def retry(self):
    if self.request.retries == 0:
        raise self.retry(countdown=0.5, max_retries=3, exc=RuntimeError("try again"))
    return "second time lucky"


@app.task(base=GafferTask, bind=True, name="rproj.sleepy")
def sleepy(self, seconds):
    time.sleep(seconds)
    return seconds


@app.task(bind=True, name="rproj.flaky")
def flaky(self):
    if os.path.exists(FLAG):
        raise RuntimeError("the flag file says no")
    return "fine"


@app.task(bind=True, name="rproj.plain")
def plain(self):
    return "plain"


def _fetch(session, after, limit):
    query = select(Item).order_by(Item.id).limit(limit)
    if after is not None:
        query = query.where(Item.id > after)
    return list(session.scalars(query))


def _handle(session, item):
    time.sleep(0.01)
    item.handled += 1


@app.task(base=GafferTask, bind=True, name="rproj.batchy")
def batchy(self):
    report = self.run_batches("batchy", _fetch, _handle, key=lambda item: item.id, batch_size=20)
    return report.processed
"""


def write_runs_project(directory: Path, broker: str, database: str) -> str:
    (directory / "rproj.py").write_text(
        PROJECT.format(broker=broker, database=database, flag=str(directory / "broken.flag"))
    )
    return "rproj"
