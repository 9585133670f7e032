"""The Gaffer database of one app: settings, engine, models and sessions in one place."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, Engine
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session

from ..exceptions import DatabaseNotReady, DatabaseUnavailable
from ..settings import GafferSettings, mask_url, settings_for
from .engine import (
    autocommit_connection,
    get_engine,
    held_connection,
    read_only,
    session_factory,
)
from .migrate import current_revision, head_revision, known_revisions, migrate
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

    @property
    def partition_interval(self) -> timedelta:
        """The period of one partition of the ledger and the run records (PostgreSQL)."""
        return timedelta(seconds=self.settings.partition_interval)

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

    def migrate(self, to: str = "head") -> tuple[str | None, str | None]:
        """Apply the shipped migrations up (or down) to ``to``; the revisions before and
        after. DatabaseNotReady for a revision this version does not know."""
        with _unavailable_as_gaffer_error(self):
            try:
                settings = self.settings
                return migrate(
                    self.engine,
                    settings.table_prefix,
                    to,
                    partition_interval=settings.partition_interval,
                )
            except ValueError as exc:
                raise DatabaseNotReady(
                    f"cannot migrate the Gaffer database at {self.settings.masked_url}: "
                    f"{exc}; celery-gaffer {_version()}"
                ) from exc

    def check_ready(self) -> None:
        """Raise DatabaseNotReady unless the database exists and is at this version's
        revision (a missing SQLite file is not created), DatabaseUnavailable when it
        cannot be reached."""
        where = self.settings.masked_url
        url = self.settings.database_url
        on_disk = url.get_backend_name() == "sqlite" and url.database not in (None, "", ":memory:")
        if on_disk and not Path(str(url.database)).exists():
            raise DatabaseNotReady(
                f"there is no Gaffer database at {where}: run `celery -A <app> gaffer "
                "migrate` to create it"
            )
        with _unavailable_as_gaffer_error(self):
            current = current_revision(self.engine, self.settings.table_prefix)
        if current == head_revision():
            return
        if current is None:
            raise DatabaseNotReady(
                f"the Gaffer database at {where} is not migrated: run `celery -A <app> "
                "gaffer migrate`"
            )
        if current not in known_revisions():
            raise DatabaseNotReady(
                f"the Gaffer database at {where} is at revision {current}, which "
                f"celery-gaffer {_version()} does not know: it was migrated by a newer "
                "version; run that version, or its `gaffer migrate --to` to go back"
            )
        raise DatabaseNotReady(
            f"the Gaffer database at {where} is at the older revision {current}: run "
            "`celery -A <app> gaffer migrate`"
        )


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
                f"{driver_reason(exc)}"
            ) from exc
        raise


def driver_reason(exc: BaseException) -> str:
    """The driver's own reason for a database error, on one line (connection refused,
    password authentication failed, database does not exist...)."""
    orig = getattr(exc, "orig", None) or exc
    lines = [line.strip() for line in str(orig).splitlines() if line.strip()]
    text = " ".join(lines)[:300] or type(orig).__name__
    return mask_url(text) if "://" in text else text


# Errors that waiting does not fix: authentication (28xxx), a missing database (3D000),
# no privilege (42501), SQLite files that cannot be opened or written, missing tables.
_PERMANENT_SQLSTATES = ("28", "3D000", "42501")
_PERMANENT_TEXT = (
    "password authentication failed",
    "no pg_hba.conf entry",
    "does not exist",
    "permission denied",
    "readonly database",
    "unable to open database file",
    "no such table",
)


def is_lock_timeout(exc: OperationalError) -> bool:
    """Whether a statement ended because it waited for a lock longer than its
    ``lock_timeout`` (PostgreSQL's 55P03)."""
    code = getattr(exc.orig, "sqlstate", None)
    return code == "55P03" or "lock timeout" in str(exc.orig).lower()


def is_permanent(exc: BaseException) -> bool:
    """Whether a database error is a mistake to fix rather than an outage to wait out."""
    cause = exc.__cause__ if isinstance(exc, DatabaseUnavailable) else exc
    orig = getattr(cause, "orig", None) or cause
    state = str(getattr(orig, "sqlstate", "") or "")
    if state and state.startswith(_PERMANENT_SQLSTATES):
        return True
    text = str(orig).lower()
    return any(marker in text for marker in _PERMANENT_TEXT)


def fix_for(exc: BaseException) -> str:
    """What to do about a database error that :func:`is_permanent` calls a mistake."""
    cause = exc.__cause__ if isinstance(exc, DatabaseUnavailable) else exc
    orig = getattr(cause, "orig", None) or cause
    state = str(getattr(orig, "sqlstate", "") or "")
    text = str(orig).lower()
    if state.startswith("28") or "password" in text or 'role "' in text or "pg_hba" in text:
        return "check the user name and password in gaffer_database_url"
    if state == "3D000" or ("database" in text and "does not exist" in text):
        return "create the database, then run `celery -A <app> gaffer migrate`"
    if "readonly database" in text or "unable to open database file" in text:
        return "make the SQLite file and its folder writable by the user Beat runs as"
    if state == "42501" or "permission denied" in text:
        return "grant the database user access to the Gaffer tables"
    if "does not exist" in text or "no such table" in text:
        return "run `celery -A <app> gaffer migrate`"
    return "fix gaffer_database_url or the database, then start Beat again"


def _version() -> str:
    try:
        return version("celery-gaffer")
    except PackageNotFoundError:  # pragma: no cover - a source tree not installed
        return "(unknown version)"
