"""``gaffer_database_url = "django://<alias>"``: the Gaffer database is one of Django's.

The URL is built from ``DATABASES[alias]`` of the Django settings (engine, name, user,
password, host, port and the libpq options of ``OPTIONS``), so that the Gaffer tables
live in the same database as the effects that Django's ORM writes, without repeating the
secrets. PostgreSQL and SQLite are supported, as for any Gaffer database. Django is
imported only when a ``django://`` URL is read.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sqlalchemy.engine import URL

from .exceptions import ConfigurationError

SCHEME = "django://"

#: Django database engines and the SQLAlchemy driver of the same database.
ENGINES = {
    "django.db.backends.postgresql": "postgresql+psycopg",
    "django.contrib.gis.db.backends.postgis": "postgresql+psycopg",
    "django.db.backends.sqlite3": "sqlite",
}

#: Keys of a PostgreSQL ``OPTIONS`` that Django's backend reads itself; every other key
#: is a libpq connection parameter (``sslmode``, ``connect_timeout``...), passed on.
DJANGO_ONLY_OPTIONS = frozenset(
    {"isolation_level", "assume_role", "server_side_binding", "pool", "cursor_factory"}
)


def django_alias(value: Any) -> str | None:
    """The Django database alias a ``django://<alias>`` URL names (``django://`` alone:
    ``default``), or None for any other value."""
    if not isinstance(value, str) or not value.strip().lower().startswith(SCHEME):
        return None
    return value.strip()[len(SCHEME) :].strip("/") or "default"


def django_database_url(alias: str, key: str = "gaffer_database_url") -> URL:
    """The SQLAlchemy URL of Django's database ``alias``; raise ConfigurationError naming
    ``key`` when Django, its settings or the alias are missing or the engine is neither
    PostgreSQL nor SQLite."""
    try:
        from django.conf import settings
        from django.core.exceptions import ImproperlyConfigured
    except ImportError as exc:
        raise ConfigurationError(
            f"{key}: {SCHEME}{alias} needs Django installed (pip install 'celery-gaffer[django]')",
            field=key,
        ) from exc
    try:
        databases: dict[str, dict[str, Any]] = settings.DATABASES
    except (ImproperlyConfigured, ImportError) as exc:
        raise ConfigurationError(
            f"{key}: {SCHEME}{alias} needs the Django settings: set DJANGO_SETTINGS_MODULE "
            f"to an importable module before the Celery app reads its configuration "
            f"({str(exc).splitlines()[0]})",
            field=key,
        ) from None
    entry = databases.get(alias)
    if entry is None:
        known = ", ".join(sorted(databases)) or "none"
        raise ConfigurationError(
            f"{key}: Django's DATABASES has no alias {alias!r} (it has: {known})", field=key
        )
    engine = str(entry.get("ENGINE") or "")
    driver = ENGINES.get(engine)
    if driver is None:
        raise ConfigurationError(
            f"{key}: DATABASES[{alias!r}] uses {engine or 'no ENGINE'}; a Gaffer database "
            "is PostgreSQL (django.db.backends.postgresql) or SQLite (django.db.backends.sqlite3)",
            field=key,
        )
    if driver == "sqlite":
        return URL.create("sqlite", database=_sqlite_path(entry.get("NAME"), alias, key))
    options = entry.get("OPTIONS") or {}
    port = entry.get("PORT")
    try:
        port = int(port) if port else None
    except (TypeError, ValueError):
        raise ConfigurationError(
            f"{key}: DATABASES[{alias!r}]['PORT'] is {port!r}, not a port number", field=key
        ) from None
    return URL.create(
        driver,
        username=entry.get("USER") or None,
        password=entry.get("PASSWORD") or None,
        host=entry.get("HOST") or None,
        port=port,
        database=entry.get("NAME") or None,
        query={
            name: str(value)
            for name, value in options.items()
            if name not in DJANGO_ONLY_OPTIONS
            and isinstance(value, (str, int))
            and not isinstance(value, bool)
        },
    )


def _sqlite_path(name: Any, alias: str, key: str) -> str:
    text = str(name or "")
    if not text or text == ":memory:" or "mode=memory" in text:
        raise ConfigurationError(
            f"{key}: DATABASES[{alias!r}] is an in-memory SQLite database, which no other "
            "process can open; give it a file NAME",
            field=key,
        )
    return str(Path(text))
