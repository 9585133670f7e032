"""A throwaway Celery project for acceptance tests, written into a temporary folder.

Its task ``proj.record`` inserts one row per delivery into ``test_deliveries`` (in the
Gaffer database), so a test can count deliveries per task id after the processes stop.
"""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import text

from celery_gaffer.settings import parse_database_url
from celery_gaffer.store import get_engine

PROJECT = """
import os
from celery import Celery
from sqlalchemy import create_engine, text
import celery_gaffer

app = Celery("proj", broker={broker!r})
app.conf.gaffer_database_url = {database!r}
app.conf.broker_connection_retry_on_startup = True
app.conf.worker_hijack_root_logger = True
app.conf.task_acks_late = True
app.conf.worker_prefetch_multiplier = 4
{extra}
celery_gaffer.install(app)

_engine = None


def engine():
    global _engine
    if _engine is None or _engine_pid != os.getpid():
        _set_engine()
    return _engine


_engine_pid = None


def _set_engine():
    global _engine, _engine_pid
    _engine = create_engine({database_sa!r})
    _engine_pid = os.getpid()


@app.task(bind=True, name="proj.record")
def record(self, label="", sleep=0.0):
    import time
    time.sleep(sleep)
    headers = self.request.headers or {{}}
    key = getattr(self.request, "gaffer_key", None) or headers.get("gaffer_key")
    with engine().begin() as conn:
        conn.execute(
            text("INSERT INTO test_deliveries (task_id, gaffer_key, label, pid) "
                 "VALUES (:task_id, :key, :label, :pid)"),
            {{"task_id": self.request.id, "key": key, "label": label, "pid": os.getpid()}},
        )
"""


def write_project(directory: Path, broker: str, database: str, extra: str = "") -> str:
    """Write ``proj.py`` and create an empty ``test_deliveries`` table; returns the module."""
    url = parse_database_url(database)
    (directory / "proj.py").write_text(
        PROJECT.format(
            broker=broker,
            database=database,
            database_sa=url.render_as_string(hide_password=False),
            extra=extra,
        )
    )
    with get_engine(url).begin() as conn:
        conn.execute(text("DROP TABLE IF EXISTS test_deliveries"))
        conn.execute(
            text(
                "CREATE TABLE test_deliveries (task_id VARCHAR(64) NOT NULL, "
                "gaffer_key VARCHAR(512), label VARCHAR(200), pid INTEGER)"
            )
        )
    return "proj"


def deliveries(database: str) -> list[tuple[str, str | None, str | None]]:
    """Every recorded delivery: (task_id, gaffer_key, label)."""
    with get_engine(parse_database_url(database)).connect() as conn:
        rows = conn.execute(text("SELECT task_id, gaffer_key, label FROM test_deliveries"))
        return [(row[0], row[1], row[2]) for row in rows]
