"""Fixtures shared by every test folder: fresh databases, Redis, Celery's in-process app."""

from __future__ import annotations

import shutil
import signal
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
import redis
from sqlalchemy import text
from sqlalchemy.engine import URL, make_url

from celery_gaffer.settings import parse_database_url
from celery_gaffer.store import dispose_engines, get_engine, migrate, models_for

from . import redis_claim
from .services import AMQP_URL, POSTGRES_URL, REDIS_SERVER, REDIS_URL, service_missing
from .support import STOP_SIGNALS, FrozenClock, celerys_handler

pytest_plugins = ("celery.contrib.pytest",)


def _libpq(url: URL) -> str:
    return url.set(drivername="postgresql").render_as_string(hide_password=False)


@pytest.fixture(scope="session")
def postgres_server() -> URL:
    """The PostgreSQL server's maintenance URL (fails under CI when it does not answer)."""
    url = parse_database_url(POSTGRES_URL, "GAFFER_TEST_POSTGRES_URL")
    try:
        with psycopg.connect(_libpq(url), connect_timeout=3) as conn:
            conn.execute("SELECT 1")
    except psycopg.Error as exc:
        service_missing("PostgreSQL", POSTGRES_URL, exc)
    return url


def _create_database(server: URL) -> URL:
    name = f"gaffer_test_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(_libpq(server), autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return server.set(database=name)


def _drop_database(server: URL, database: URL) -> None:
    dispose_engines()
    with psycopg.connect(_libpq(server), autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{database.database}" WITH (FORCE)')


@pytest.fixture(scope="session")
def postgres_database(postgres_server: URL) -> Iterator[URL]:
    """A fresh, migrated PostgreSQL database for this test run, dropped at the end."""
    database = _create_database(postgres_server)
    try:
        migrate(get_engine(database), "gaffer_")
        yield database
    finally:
        _drop_database(postgres_server, database)


@pytest.fixture
def postgres_url(postgres_database: URL) -> str:
    """The run's PostgreSQL database with every Gaffer table emptied for this test."""
    models = models_for("gaffer_")
    tables = ", ".join(table.name for table in models.metadata.sorted_tables)
    with get_engine(postgres_database).begin() as conn:
        conn.execute(text(f"TRUNCATE {tables} RESTART IDENTITY"))
    return postgres_database.render_as_string(hide_password=False)


@pytest.fixture
def empty_postgres_url(postgres_server: URL) -> Iterator[str]:
    """A brand-new empty PostgreSQL database for one test (migration tests)."""
    database = _create_database(postgres_server)
    try:
        yield database.render_as_string(hide_password=False)
    finally:
        _drop_database(postgres_server, database)


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A migrated SQLite file that each test copies (cheaper than migrating per test)."""
    path = tmp_path_factory.mktemp("sqlite-template") / "gaffer.sqlite3"
    engine = get_engine(make_url(f"sqlite:///{path}"))
    migrate(engine, "gaffer_")
    # Closing the last connection checkpoints the WAL into the file we copy.
    dispose_engines()
    return path


@pytest.fixture
def sqlite_url(tmp_path: Path, sqlite_template: Path) -> str:
    """A fresh migrated SQLite file for this test."""
    path = tmp_path / "gaffer.sqlite3"
    shutil.copyfile(sqlite_template, path)
    return f"sqlite:///{path}"


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request: pytest.FixtureRequest) -> str:
    """Each store test runs on a fresh SQLite file and on the run's PostgreSQL database."""
    fixture = "sqlite_url" if request.param == "sqlite" else "postgres_url"
    return str(request.getfixturevalue(fixture))


@pytest.fixture(scope="session")
def redis_database() -> Iterator[redis_claim.Claim | None]:
    """This run's Redis database: the one ``GAFFER_TEST_REDIS_URL`` names (``None``), or an
    empty one claimed on 127.0.0.1:6379, deleted at the end (see tests/redis_claim.py)."""
    if REDIS_URL:
        yield None
        return
    try:
        claim = redis_claim.claim(REDIS_SERVER)
    except redis.RedisError as exc:
        service_missing("Redis", REDIS_SERVER, exc)
    except redis_claim.ClaimError as exc:
        pytest.fail(str(exc), pytrace=False)
    claim.keep()
    try:
        yield claim
    finally:
        claim.release()


@pytest.fixture
def redis_url(redis_database: redis_claim.Claim | None) -> str:
    """This run's Redis database, emptied for this test (fails under CI when Redis does not
    answer; never empties a database another test run claimed)."""
    url = REDIS_URL if redis_database is None else redis_database.url
    try:
        redis_claim.empty(url, "" if redis_database is None else redis_database.owner)
    except redis.RedisError as exc:
        service_missing("Redis", url, exc)
    except redis_claim.ClaimError as exc:
        pytest.fail(str(exc), pytrace=False)
    return url


@pytest.fixture
def amqp_url() -> str:
    """RabbitMQ's URL (fails under CI when RabbitMQ does not answer); tests use queues of
    their own, since RabbitMQ keeps queues between runs."""
    from kombu import Connection

    try:
        with Connection(AMQP_URL, connect_timeout=3) as connection:
            connection.ensure_connection(max_retries=1)
    except Exception as exc:  # noqa: BLE001 - any failure means "not reachable"
        service_missing("RabbitMQ", AMQP_URL, exc)
    return AMQP_URL


@pytest.fixture
def clock() -> FrozenClock:
    """A clock that moves only when told to: 2026-06-01 12:00Z, a Monday."""
    return FrozenClock()


@pytest.fixture
def celery_handlers() -> Iterator[None]:
    """Stop handlers standing for Celery's (:func:`.support.celerys_handler`), and this
    process's own put back afterwards."""
    saved = {signum: signal.getsignal(signum) for signum in STOP_SIGNALS}
    for signum in STOP_SIGNALS:
        signal.signal(signum, celerys_handler)
    yield
    for signum, handler in saved.items():
        signal.signal(signum, handler)
