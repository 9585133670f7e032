"""The chaos workload's Celery project, written into a temporary folder."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import text

from celery_gaffer.settings import parse_database_url
from celery_gaffer.store import get_engine

PROJECT = """
import os
import random
import time

from celery import Celery
from sqlalchemy import Integer, select, text
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

import celery_gaffer
from celery_gaffer import GafferTask, LeaseHeld

app = Celery("chaosproj", broker={broker!r})
app.conf.gaffer_database_url = {database!r}
app.conf.gaffer_lease_ttl = 3
app.conf.gaffer_republish_after = 5
app.conf.gaffer_confirm_delivery_after = 15
app.conf.broker_connection_retry_on_startup = True
app.conf.broker_connection_max_retries = None
app.conf.worker_prefetch_multiplier = 1
app.conf.task_reject_on_worker_lost = True
app.conf.broker_transport_options = {{
    "visibility_timeout": 20,
    "unacked_restore_interval": 1,
    "unacked_restore_throttle": 1,
}}
# How chaos.fenced writes: "session" (self.session()) or "django" (self.atomic()).
FENCED_WRITER = "session"
{patch}
celery_gaffer.install(app)


class Base(DeclarativeBase):
    pass


class Item(Base):
    __tablename__ = "chaos_items"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    handled: Mapped[int] = mapped_column(Integer, default=0)


@app.task(base=GafferTask, bind=True, name="chaos.effect")
def effect(self):
    with self.session() as s:
        s.execute(
            text("INSERT INTO chaos_effects (key, task_id, pid) VALUES (:key, :task_id, :pid)"),
            {{"key": self.request.gaffer_key, "task_id": self.request.id, "pid": os.getpid()}},
        )
        time.sleep(random.random() * 0.2)


@app.task(base=GafferTask, bind=True, name="chaos.fenced")
def fenced(self):
    try:
        holder = self.lease("chaos-lease", ttl=3)
        lease = holder.__enter__()
    except LeaseHeld:
        return "held"
    try:
        for _ in range(5):
            if FENCED_WRITER == "django":
                _write_with_django(self, lease)
            else:
                with self.session() as s:
                    seq = s.execute(text("UPDATE chaos_seq SET n = n + 1 RETURNING n")).scalar_one()
                    s.execute(
                        text(
                            "INSERT INTO chaos_fenced (seq, fence, pid) "
                            "VALUES (:seq, :fence, :pid)"
                        ),
                        {{"seq": seq, "fence": lease.fence, "pid": os.getpid()}},
                    )
            time.sleep(0.3)
    finally:
        holder.__exit__(None, None, None)
    return "wrote"


def _write_with_django(self, lease):
    from django.db import connection

    with self.atomic(), connection.cursor() as cursor:
        cursor.execute("UPDATE chaos_seq SET n = n + 1 RETURNING n")
        seq = cursor.fetchone()[0]
        cursor.execute(
            "INSERT INTO chaos_fenced (seq, fence, pid) VALUES (%s, %s, %s)",
            [seq, lease.fence, os.getpid()],
        )


def _fetch(session, after, limit):
    query = select(Item).order_by(Item.id).limit(limit)
    if after is not None:
        query = query.where(Item.id > after)
    return list(session.scalars(query))


def _handle(session, item):
    item.handled += 1


@app.task(base=GafferTask, bind=True, name="chaos.batch", gaffer_key="chaos-batch:{{run}}")
def batch(self, run):
    def slow_fetch(session, after, limit):
        time.sleep(0.2)
        return _fetch(session, after, limit)

    report = self.run_batches(
        "chaos-items", slow_fetch, _handle, key=lambda item: item.id, batch_size=100
    )
    return report.processed
"""

# Patches a test may add to the project (never a switch in the package).
NO_FENCE_CHECK = (
    "import celery_gaffer.fencing.leases as _leases\n"
    "import celery_gaffer.store.leases as _lease_rows\n"
    "# The guarantee, broken on purpose: no fence check at commit (nor in Lease.fence's\n"
    "# check, which makes a fence durable before it is read), and renewal that never\n"
    "# notices a takeover (which would otherwise stop the run before its next commit).\n"
    "_lease_rows.check_fence = lambda *args, **kwargs: None\n"
    "_leases.LeaseClient.renew = lambda self, lease: True\n"
)


def django_writer(database: str) -> str:
    """A patch that configures Django on the chaos database and has chaos.fenced write
    through Django's connection in ``self.atomic()`` (the Gaffer URL: ``django://default``)."""
    url = parse_database_url(database)
    entry = {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": url.database,
        "USER": url.username or "",
        "PASSWORD": url.password or "",
        "HOST": url.host or "",
        "PORT": url.port or 5432,
    }
    return (
        "import django\n"
        "from django.conf import settings\n"
        f"settings.configure(DATABASES={{'default': {entry!r}}}, USE_TZ=True)\n"
        "django.setup()\n"
        "app.conf.gaffer_database_url = 'django://default'\n"
        "FENCED_WRITER = 'django'\n"
    )


# The same on PostgreSQL, where a commit's fence check is the database function
# gaffer_seal (made by migration 0005): replaced by one that only claims the key.
NO_FENCE_CHECK_SQL = """
CREATE OR REPLACE FUNCTION gaffer_seal(
    p_names varchar[], p_fences bigint[], p_owners varchar[],
    p_key varchar, p_task_id varchar, p_fence bigint, p_complete boolean
) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    IF p_key IS NOT NULL THEN
        INSERT INTO gaffer_keys AS k (key, state, task_id, fence, claimed_at, completed_at)
            VALUES (
                p_key, CASE WHEN p_complete THEN 'completed' ELSE 'claimed' END,
                p_task_id, p_fence, clock_timestamp(),
                CASE WHEN p_complete THEN clock_timestamp() END)
            ON CONFLICT (key) DO UPDATE SET
                state = excluded.state, task_id = excluded.task_id,
                fence = excluded.fence, completed_at = excluded.completed_at
            WHERE k.state = 'claimed';
        IF NOT FOUND THEN
            RAISE EXCEPTION USING ERRCODE = 'ZG002', MESSAGE = 'key already completed';
        END IF;
    END IF;
END
$$
"""


def write_project(directory: Path, broker: str, database: str, *, patch: str = "") -> str:
    (directory / "chaosproj.py").write_text(
        PROJECT.format(broker=broker, database=database, patch=patch)
    )
    return "chaosproj"


def create_tables(database: str, items: int) -> None:
    url = parse_database_url(database)
    with get_engine(url).begin() as conn:
        for table in ("chaos_effects", "chaos_fenced", "chaos_seq", "chaos_items"):
            conn.execute(text(f"DROP TABLE IF EXISTS {table}"))
        conn.execute(
            text("CREATE TABLE chaos_effects (key VARCHAR(512), task_id VARCHAR(64), pid INTEGER)")
        )
        conn.execute(
            text("CREATE TABLE chaos_fenced (seq INTEGER PRIMARY KEY, fence INTEGER, pid INTEGER)")
        )
        conn.execute(text("CREATE TABLE chaos_seq (n INTEGER NOT NULL)"))
        conn.execute(text("INSERT INTO chaos_seq VALUES (0)"))
        conn.execute(
            text("CREATE TABLE chaos_items (id INTEGER PRIMARY KEY, handled INTEGER NOT NULL)")
        )
        conn.execute(
            text(f"INSERT INTO chaos_items SELECT g, 0 FROM generate_series(1, {items}) g")
        )
