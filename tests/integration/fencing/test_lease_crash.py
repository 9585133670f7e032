"""Lease acquisitions that a real PostgreSQL crash loses, and fences that survive it.

A private PostgreSQL cluster (``initdb`` in a temporary folder, its own port) is crashed
with ``pg_ctl stop -m immediate`` and started again, which runs crash recovery. Its WAL
writer wakes every 10 s, so an acquisition (a commit that does not wait for the disk) is
still only in memory when the crash comes, unless a commit that waits for the disk
flushed the log past it.
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from celery import Celery, states
from celery.app.trace import build_tracer
from sqlalchemy import select, text

import celery_gaffer
from celery_gaffer import FenceLost, GafferTask
from celery_gaffer.fencing.leases import LeaseClient
from celery_gaffer.store import Database, database_for, dispose_engines
from celery_gaffer.store.leases import check_fence
from celery_gaffer.store.models import table_of

from ...services import service_missing


@dataclass
class Cluster:
    data: Path
    port: int
    log: Path

    @property
    def url(self) -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres"

    def pg_ctl(self, *args: str) -> None:
        options = (
            f"-p {self.port} -k {self.data.parent} -c listen_addresses=127.0.0.1 "
            "-c wal_writer_delay=10s -c fsync=on -c synchronous_commit=on"
        )
        _as_postgres(
            [
                _bin("pg_ctl"),
                "-D",
                str(self.data),
                "-l",
                str(self.log),
                "-o",
                options,
                "-w",
                "-t",
                "60",
                *args,
            ]
        )

    def crash(self) -> None:
        """Kill the server without a shutdown checkpoint, then start it (crash recovery)."""
        dispose_engines(close=False)  # their connections die with the server
        self.pg_ctl("stop", "-m", "immediate")
        self.pg_ctl("start")


def _bin(name: str) -> str:
    found = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}")) or [shutil.which(name) or ""]
    return found[-1]


def _as_postgres(command: list[str]) -> None:
    if os.geteuid() == 0:  # initdb and the server refuse to run as root
        command = ["runuser", "-u", "postgres", "--", *command]
    subprocess.run(command, check=True, capture_output=True, timeout=120)


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    if not os.path.exists(_bin("initdb")):
        service_missing("PostgreSQL's initdb", "initdb", FileNotFoundError("initdb"))
    # Not under pytest's tmp folder: the server's user must be able to reach it.
    root = Path(tempfile.mkdtemp(prefix="gaffer-crashable-postgres-"))
    if os.geteuid() == 0:
        shutil.chown(root, "postgres")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    found = Cluster(data=root / "data", port=port, log=root / "server.log")
    _as_postgres(
        [_bin("initdb"), "-D", str(found.data), "-A", "trust", "-U", "postgres", "--no-sync"]
    )
    found.pg_ctl("start")
    try:
        yield found
    finally:
        dispose_engines()
        found.pg_ctl("stop", "-m", "immediate")
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def database(cluster: Cluster) -> Iterator[Database]:
    app = Celery("lease-crash", broker="memory://", set_as_current=False)
    app.conf.gaffer_database_url = cluster.url
    database = database_for(app)
    database.migrate()
    yield database
    app.close()


def lease_row(database: Database, name: str) -> tuple[str | None, int] | None:
    table = table_of(database.models.Lease)
    with database.read() as conn:
        row = conn.execute(select(table.c.owner, table.c.fence).where(table.c.name == name))
        found = row.first()
    return None if found is None else (found.owner, int(found.fence))


def test_a_crash_loses_an_acquisition_and_its_number_is_reissued_but_never_honoured(
    cluster: Cluster, database: Database
) -> None:
    client = LeaseClient(database)
    for attempt in range(3):
        name = f"crash-{attempt}"
        first = client.acquire(name, "first-holder", 60)
        cluster.crash()
        if lease_row(database, name) is None:
            break  # the acquisition was lost with the server's memory
    else:
        pytest.fail("the server kept every acquisition: the crash did not lose the log tail")
    second = client.acquire(name, "second-holder", 60)
    assert second.token == first.token  # the same fence number, handed out again
    with pytest.raises(FenceLost), database.begin() as conn:
        check_fence(conn, database.models, name, first.token, first.owner)
    assert client.renew(first) is False
    client.release(first)
    assert lease_row(database, name) == ("second-holder", second.token)
    with pytest.raises(FenceLost):
        _ = first.fence  # never handed out: it was not durable and is not the holder's
    assert second.fence == second.token  # made durable by this read


def test_a_fence_read_or_a_fenced_commit_makes_the_acquisition_survive_a_crash(
    cluster: Cluster, database: Database
) -> None:
    client = LeaseClient(database)
    read = client.acquire("read-then-crash", "reader", 60)
    assert read.durable is False
    fence = read.fence  # one locking check that waits for the disk
    assert read.durable is True
    committed = client.acquire("commit-then-crash", "committer", 60)
    with database.begin() as conn:  # what a fenced commit does, in the same order
        check_fence(conn, database.models, committed.name, committed.token, committed.owner)
    cluster.crash()
    assert lease_row(database, "read-then-crash") == ("reader", fence)
    assert lease_row(database, "commit-then-crash") == ("committer", committed.token)


def test_a_run_whose_acquisition_a_crash_lost_is_tried_again_not_failed(
    cluster: Cluster, database: Database
) -> None:
    """Its commit fails the fence check (the acquisition is gone), but nobody else holds
    the lease or does the work: the run is retried, as after any database outage. A lease
    taken over by another holder still ends the run with FenceLost."""
    app = Celery("lease-crash-run", broker="memory://", set_as_current=False)
    app.conf.gaffer_database_url = cluster.url
    celery_gaffer.install(app)

    @app.task(base=GafferTask, bind=True, name="t.crashing")
    def crashing(self: GafferTask, how: str) -> None:
        with self.lease(f"crashing-{how}-{self.request.id}") as lease:
            if how == "crash":
                cluster.crash()
            else:  # another holder takes the lease over
                LeaseClient(database).acquire(lease.name, "thief", 60, steal=True)
            with self.session() as s:
                s.execute(text("SELECT 1"))

    def run(how: str) -> Any:
        task_id = str(uuid.uuid4())
        tracer = build_tracer(crashing.name, crashing, app=app, eager=False, hostname="h@x")
        request = {"id": task_id, "hostname": "h@x", "delivery_info": {}}
        return tracer(task_id, (how,), {}, request)

    assert run("crash").info.state == states.RETRY
    assert run("thief").info.state == states.FAILURE
    app.close()
