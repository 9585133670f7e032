"""Beat starts whatever it finds: a database that is not up yet, a metrics port taken.

Real ``celery beat`` processes, real PostgreSQL and Redis. The database "comes up" when
the test opens a TCP forwarder on the port Beat was given; until then that port refuses
connections, as a stopped PostgreSQL does.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import closing, suppress
from pathlib import Path

import pytest
from sqlalchemy import func, select
from sqlalchemy.engine import URL

from celery_gaffer.settings import parse_database_url
from celery_gaffer.store import database_for

from ..processes import CeleryProcess, celery_processes
from .project import write_project

pytestmark = [pytest.mark.acceptance, pytest.mark.postgres, pytest.mark.redis]


def _free_port() -> int:
    with closing(socket.socket()) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


class Forwarder:
    """A TCP forwarder from 127.0.0.1:``port`` to ``target``, started on demand."""

    def __init__(self, port: int, target: tuple[str, int]) -> None:
        self.port = port
        self.target = target
        self.server: socket.socket | None = None
        self.stopped = threading.Event()

    def start(self) -> None:
        server = socket.socket()
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        server.bind(("127.0.0.1", self.port))
        server.listen(16)
        server.settimeout(0.2)
        self.server = server
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        assert self.server is not None
        while not self.stopped.is_set():
            try:
                client, _ = self.server.accept()
            except OSError:
                continue
            upstream = socket.create_connection(self.target)
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(source, sink), daemon=True).start()

    def _pipe(self, source: socket.socket, sink: socket.socket) -> None:
        with suppress(OSError):
            while data := source.recv(65536):
                sink.sendall(data)
        with suppress(OSError):
            sink.shutdown(socket.SHUT_WR)

    def stop(self) -> None:
        self.stopped.set()
        if self.server is not None:
            self.server.close()


@pytest.fixture
def forwarder(postgres_url: str) -> Iterator[Forwarder]:
    real = parse_database_url(postgres_url)
    forwarder = Forwarder(_free_port(), (real.host or "127.0.0.1", real.port or 5432))
    yield forwarder
    forwarder.stop()


def _through(url: URL, port: int) -> str:
    return url.set(port=port).render_as_string(hide_password=False)


def _sent_fires(postgres_url: str) -> int:
    from celery import Celery

    app = Celery("count", set_as_current=False)
    app.conf.gaffer_database_url = postgres_url
    database = database_for(app)
    fires = database.models.Fire
    with database.read() as conn:
        count: int = conn.execute(select(func.count()).where(fires.state == "sent")).scalar_one()
    app.close()
    return count


def test_beat_started_before_its_database_waits_then_fires(
    tmp_path: Path, postgres_url: str, redis_url: str, forwarder: Forwarder
) -> None:
    via = _through(parse_database_url(postgres_url), forwarder.port)
    module = write_project(
        tmp_path,
        redis_url,
        postgres_url,
        extra=(
            f"app.conf.gaffer_database_url = {via!r}  # through the forwarder, not up yet\n"
            "from celery_gaffer import every\n"
            "app.conf.beat_schedule = {'tick': {'task': 'proj.record', 'schedule': every(1)}}\n"
        ),
    )
    with celery_processes() as started:
        beat = CeleryProcess(tmp_path, module, ["beat", "-S", "gaffer", "-l", "INFO"], "beat")
        started.append(beat)
        beat.wait_for_log("Beat cannot start yet", timeout=60)
        beat.wait_for_log("trying again in 2 s", timeout=60)
        assert "Connection refused" in beat.log() or "refused" in beat.log().lower()
        assert "Traceback" not in beat.log()
        before = _sent_fires(postgres_url)
        forwarder.start()  # the database is up
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and _sent_fires(postgres_url) <= before:
            time.sleep(0.5)
        assert _sent_fires(postgres_url) > before, beat.log()[-3000:]
        waits = beat.log().count("Beat cannot start yet")
        assert 2 <= waits <= 20  # one line per attempt, with backoff


def test_a_second_beat_on_the_same_metrics_port_runs_without_metrics(
    tmp_path: Path, postgres_url: str, redis_url: str
) -> None:
    port = _free_port()
    taken = socket.socket()
    taken.bind(("127.0.0.1", port))
    taken.listen(1)
    try:
        module = write_project(
            tmp_path,
            redis_url,
            postgres_url,
            extra=(
                f"app.conf.gaffer_metrics_port = {port}\n"
                "from celery_gaffer import every\n"
                "app.conf.beat_schedule = {'tick': {'task': 'proj.record', 'schedule': every(1)}}\n"
            ),
        )
        before = _sent_fires(postgres_url)
        with celery_processes() as started:
            beat = CeleryProcess(tmp_path, module, ["beat", "-S", "gaffer", "-l", "INFO"], "beat")
            started.append(beat)
            beat.wait_for_log("metrics not served: port", timeout=60)
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and _sent_fires(postgres_url) <= before:
                time.sleep(0.5)
            assert _sent_fires(postgres_url) > before, beat.log()[-3000:]
            assert beat.process.poll() is None
    finally:
        taken.close()


def test_beat_starts_on_a_postgres_url_as_heroku_writes_it(
    tmp_path: Path, postgres_url: str, redis_url: str
) -> None:
    written = "postgres://" + postgres_url.partition("://")[2]  # no driver named
    module = write_project(
        tmp_path,
        redis_url,
        written,
        extra=(
            "from celery_gaffer import every\n"
            "app.conf.beat_schedule = {'tick': {'task': 'proj.record', 'schedule': every(1)}}\n"
        ),
    )
    assert f"gaffer_database_url = {written!r}" in (tmp_path / "proj.py").read_text()
    before = _sent_fires(postgres_url)
    with celery_processes() as started:
        beat = CeleryProcess(tmp_path, module, ["beat", "-S", "gaffer", "-l", "INFO"], "beat")
        started.append(beat)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and _sent_fires(postgres_url) <= before:
            time.sleep(0.5)
        assert _sent_fires(postgres_url) > before, beat.log()[-3000:]
        assert "database -> postgresql+psycopg://" in beat.log()
        assert "Traceback" not in beat.log()
