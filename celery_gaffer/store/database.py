"""The Gaffer database of one app: settings, engine, models and sessions in one place."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, Engine
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session

from ..exceptions import DatabaseUnavailable
from ..settings import GafferSettings, settings_for
from .engine import (
    autocommit_connection,
    get_engine,
    held_connection,
    read_only,
    session_factory,
)
from .migrate import migrate
from .models import Models, models_for


@dataclass(frozen=True, slots=True)
class Database:
    """Everything that talks to the Gaffer database goes through one of these.

    Cheap to build: the engine is the process-wide one for the URL, made on first use.
    """

    settings: GafferSettings

    @property
    def engine(self) -> Engine:
        return get_engine(self.settings.database_url)

    @property
    def models(self) -> Models:
        return models_for(self.settings.table_prefix)

    @property
    def dialect(self) -> str:
        return self.settings.database_url.get_backend_name()

    def session(self) -> Session:
        """A new ORM session (its transactions are ``BEGIN IMMEDIATE`` on SQLite)."""
        return session_factory(self.engine)()

    @contextmanager
    def begin(self) -> Iterator[Connection]:
        """A connection in a write transaction, committed on success."""
        with _unavailable_as_gaffer_error(self), self.engine.begin() as connection:
            yield connection

    @contextmanager
    def read(self) -> Iterator[Connection]:
        """A connection in a read-only transaction (never takes SQLite's write lock)."""
        with (
            _unavailable_as_gaffer_error(self),
            self.engine.connect() as connection,
            read_only(connection).begin(),
        ):
            yield connection

    @contextmanager
    def autocommit(self, *, relaxed: bool = False) -> Iterator[Connection]:
        """A connection whose statements each commit on their own: one round trip each.

        For single-statement reads and for run records (``relaxed``: their commits need
        not wait for the disk on PostgreSQL).
        """
        engine = get_engine(self.settings.database_url, relaxed=relaxed)
        with (
            _unavailable_as_gaffer_error(self),
            held_connection(engine) as connection,
        ):
            yield autocommit_connection(connection)

    @contextmanager
    def leases(self) -> Iterator[Connection]:
        """An autocommit connection for lease statements (one statement, one transaction).

        On PostgreSQL its row-lock waits end after ``LEASE_LOCK_TIMEOUT_MS`` with a lock
        timeout error.
        """
        engine = get_engine(self.settings.database_url, leases=True)
        with (
            _unavailable_as_gaffer_error(self),
            held_connection(engine) as connection,
        ):
            yield autocommit_connection(connection)

    def migrate(self) -> tuple[str | None, str]:
        """Apply the shipped migrations; returns the revision before and after."""
        with _unavailable_as_gaffer_error(self):
            return migrate(self.engine, self.settings.table_prefix)


def database_for(app: Any) -> Database:
    """The Gaffer database configured on ``app.conf``."""
    return Database(settings_for(app))


@contextmanager
def _unavailable_as_gaffer_error(database: Database) -> Iterator[None]:
    try:
        yield
    except OperationalError as exc:
        if exc.connection_invalidated or "connect" in str(exc.orig).lower():
            raise DatabaseUnavailable(
                f"cannot reach the Gaffer database at {database.settings.masked_url}: "
                f"{type(exc.orig).__name__}"
            ) from exc
        raise
