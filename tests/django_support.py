"""Django, configured once for a test process: a PostgreSQL database (alias ``default``)
and a SQLite file (``lite``), each with Django's tables, django-celery-beat's, the
tests' own app's (tests/djangoapp) and Gaffer's (prefix ``gaffer_``).

Django's settings can be configured only once per process, so every test that runs
Django in-process shares this configuration (fixture ``django_databases``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from sqlalchemy.engine import URL

#: Django's aliases of the two databases, by Gaffer's name of the backend.
ALIASES = {"postgresql": "default", "sqlite": "lite"}


@dataclass(frozen=True)
class DjangoDatabases:
    """The SQLAlchemy URLs of Django's two databases, by backend."""

    postgresql: URL
    sqlite: Path

    def url(self, backend: str) -> str:
        if backend == "postgresql":
            return self.postgresql.set(drivername="postgresql+psycopg").render_as_string(
                hide_password=False
            )
        return f"sqlite:///{self.sqlite}"


def configure(postgresql: URL, sqlite: Path) -> None:
    """Configure Django for this process and create every table in both databases."""
    import django
    from django.conf import settings
    from django.core.management import call_command

    from celery_gaffer.store import get_engine, migrate

    settings.configure(
        DATABASES={
            "default": {
                "ENGINE": "django.db.backends.postgresql",  # psycopg 3
                "NAME": postgresql.database,
                "USER": postgresql.username,
                "PASSWORD": postgresql.password or "",
                "HOST": postgresql.host,
                "PORT": postgresql.port or 5432,
            },
            "lite": {"ENGINE": "django.db.backends.sqlite3", "NAME": str(sqlite)},
        },
        INSTALLED_APPS=[
            "django.contrib.contenttypes",
            "django.contrib.auth",
            "django_celery_beat",
            "tests.djangoapp",
        ],
        USE_TZ=True,
        TIME_ZONE="UTC",
        SECRET_KEY="gaffer-tests",
        DEFAULT_AUTO_FIELD="django.db.models.BigAutoField",
    )
    django.setup()
    for alias in ("default", "lite"):
        call_command("migrate", database=alias, run_syncdb=True, verbosity=0)
    migrate(get_engine(postgresql.set(drivername="postgresql+psycopg")), "gaffer_")
    migrate(get_engine(URL.create("sqlite", database=str(sqlite))), "gaffer_")


def close() -> None:
    from django.db import connections

    connections.close_all()
