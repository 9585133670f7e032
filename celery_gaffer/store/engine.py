"""One SQLAlchemy engine per process and database URL, created lazily.

A forked child (Celery's prefork pool) must not share its parent's pooled connections:
the engines are a part of the process's :func:`~celery_gaffer.runtime.runtime`, so a
child builds fresh ones, leaving the parent's sockets alone (``dispose(close=False)``).

SQLite is the embedded default and is used by several processes on one host (Beat and
workers), so every connection runs in WAL mode with a busy timeout, and every write
transaction starts with ``BEGIN IMMEDIATE``: it takes the database's write lock up
front, so a read-then-write transaction can never be overtaken by another writer.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Any

from sqlalchemy import Connection, Engine, create_engine, event
from sqlalchemy.engine import URL
from sqlalchemy.orm import Session, sessionmaker

from ..runtime import runtime
from .idle import Held

# Milliseconds a SQLite writer waits for the write lock before giving up.
SQLITE_BUSY_TIMEOUT_MS = 30_000
# How long a lease statement waits for a row lock on PostgreSQL before giving up.
LEASE_LOCK_TIMEOUT_MS = 2000
# Execution option of the engines whose every connection is in autocommit mode.
AUTOCOMMIT_POOL = "gaffer_autocommit_pool"
# Execution option: this transaction only reads, so SQLite may start it DEFERRED.
READ_ONLY = "gaffer_read_only"


class Engines:
    """This process's engines, by URL and kind, and the idle connections of each."""

    def __init__(self) -> None:
        self.engines: dict[tuple[URL, bool, bool], Engine] = {}
        # The same engines by the URL object's identity: hashing a URL renders it as a
        # string (about 50 µs), and a run looks its engines up several times. The URL is
        # kept in the value, so its id cannot be reused while the entry exists.
        self.by_identity: dict[tuple[int, bool, bool], tuple[URL, Engine]] = {}
        self.held: dict[int, Held] = {}  # id(engine) -> its idle connections

    def get(self, url: URL, relaxed: bool, leases: bool) -> Engine:
        key = (url, relaxed, leases)  # URL is an immutable, hashable named tuple
        with runtime().lock:
            engine = self.engines.get(key)
            if engine is None:
                engine = _create_engine(url, relaxed=relaxed, leases=leases)
                self.engines[key] = engine
                if engine.get_execution_options().get(AUTOCOMMIT_POOL):
                    self.held[id(engine)] = Held(engine)
            self.by_identity[(id(url), relaxed, leases)] = (url, engine)
            return engine

    def forget(self, *, close: bool) -> None:
        """Dispose every engine (``close=False``: leave the sockets to another process)."""
        with runtime().lock:
            held, engines = list(self.held.values()), list(self.engines.values())
            self.engines.clear()
            self.by_identity.clear()
            self.held.clear()
        for idle in held:
            idle.drop(close=close)
        for engine in engines:
            engine.dispose(close=close)

    def after_fork(self) -> None:
        self.forget(close=False)


def get_engine(url: URL, *, relaxed: bool = False, leases: bool = False) -> Engine:
    """The engine for ``url`` in this process (created on first use, re-created after fork).

    ``relaxed``: a second engine for writes that are observability, not correctness (run
    records): on PostgreSQL its commits do not wait for the disk
    (``synchronous_commit=off``), which a crash can only cost the last records.

    ``leases``: a third engine for lease statements, each its own transaction: on
    PostgreSQL its sessions wait at most :data:`LEASE_LOCK_TIMEOUT_MS` for a row lock, so a
    holder paused inside a transaction on a lease row delays a contender briefly, never
    for ever (and no statement is spent setting that per transaction). Its commits do
    not wait for the disk either: every fence check also matches the lease's owner, and a
    fence is made durable before it is handed out (see :mod:`celery_gaffer.fencing.leases`).
    """
    engines = runtime().part("engines", Engines)
    found = engines.by_identity.get((id(url), relaxed, leases))
    if found is not None and found[0] is url:
        return found[1]
    return engines.get(url, relaxed, leases)


def held_connection(engine: Engine) -> AbstractContextManager[Connection]:
    """A connection of ``engine``: one kept checked out (autocommit pools) or a new one."""
    held = runtime().part("engines", Engines).held.get(id(engine))
    return engine.connect() if held is None else held.connection()


def dispose_engines(*, close: bool = True) -> None:
    """Dispose every engine of this process (``close=False`` after a fork)."""
    runtime().part("engines", Engines).forget(close=close)


def session_factory(engine: Engine) -> sessionmaker[Session]:
    """Sessions whose objects stay readable after commit."""
    return sessionmaker(bind=engine, expire_on_commit=False)


def autocommit_connection(connection: Connection) -> Connection:
    """``connection`` with each statement its own transaction (a no-op on autocommit pools)."""
    if connection.get_execution_options().get(AUTOCOMMIT_POOL):
        return connection
    return connection.execution_options(isolation_level="AUTOCOMMIT")


def read_only(connection: Connection) -> Connection:
    """Mark ``connection``'s next transaction as read-only (a DEFERRED begin on SQLite)."""
    return connection.execution_options(**{READ_ONLY: True})


def _create_engine(url: URL, *, relaxed: bool = False, leases: bool = False) -> Engine:
    if url.get_backend_name() == "sqlite":
        return _create_sqlite_engine(url)
    connect_args: dict[str, Any] = {"connect_timeout": 10, "application_name": "celery-gaffer"}
    if relaxed:
        connect_args["options"] = "-c synchronous_commit=off"
    elif leases:
        connect_args["options"] = (
            f"-c lock_timeout={LEASE_LOCK_TIMEOUT_MS} -c synchronous_commit=off"
        )
    # No pre-ping (a round trip per checkout): a connection lost to a restart fails on
    # use, SQLAlchemy then discards the whole pool, and callers retry (Beat's next tick,
    # a GafferTask's database retry). The relaxed and lease engines only ever run
    # single statements, each its own transaction: autocommit for the whole pool, so
    # that no checkout switches the connection's mode back and forth.
    options: dict[str, Any] = {}
    if relaxed or leases:
        options = {"isolation_level": "AUTOCOMMIT", "execution_options": {AUTOCOMMIT_POOL: True}}
    return create_engine(url, pool_size=5, max_overflow=10, connect_args=connect_args, **options)


def _create_sqlite_engine(url: URL) -> Engine:
    engine = create_engine(url, connect_args={"timeout": SQLITE_BUSY_TIMEOUT_MS / 1000})

    @event.listens_for(engine, "connect")
    def _configure(dbapi_connection: Any, _record: Any) -> None:
        # Take transaction control away from the sqlite3 module so that we issue BEGIN.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        try:
            if url.database not in (None, "", ":memory:"):
                cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
            cursor.execute("PRAGMA synchronous=NORMAL")
            cursor.execute("PRAGMA foreign_keys=ON")
        finally:
            cursor.close()

    @event.listens_for(engine, "begin")
    def _begin(connection: Connection) -> None:
        options = connection.get_execution_options()
        if options.get("isolation_level") == "AUTOCOMMIT":
            return  # each statement is its own transaction
        if options.get(READ_ONLY):
            connection.exec_driver_sql("BEGIN")
        else:
            connection.exec_driver_sql("BEGIN IMMEDIATE")

    return engine
