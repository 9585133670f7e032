"""Django configured once for this pytest process (see project.py), on a fresh
PostgreSQL database dropped at the end, and the Gaffer tables migrated in it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.engine import URL

from celery_gaffer.store import database_for, dispose_engines, models_for

from ...conftest import _create_database, _drop_database
from . import project


@pytest.fixture(scope="session")
def django_project(
    postgres_server: URL, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Any]]:
    """Django set up with project.py's settings; Django's tables migrated on ``default``
    and ``lite``, the Gaffer tables on both. Yields the databases' SQLAlchemy URLs."""
    import django
    from django.conf import settings

    if settings.configured:
        pytest.fail("Django is already configured in this process, not by django_project")
    folder = tmp_path_factory.mktemp("django")
    database = _create_database(postgres_server)
    settings.configure(**project.settings(database, folder))
    django.setup()
    from django.core.management import call_command
    from django.db import connections

    from celery_gaffer.contrib.django.management.commands.gaffer import run

    try:
        for alias in ("default", "lite"):
            call_command("migrate", database=alias, run_syncdb=True, verbosity=0)
            project.use_alias(alias)
            assert run(["migrate"]) == 0
        project.use_alias("default")
        yield {
            "postgresql": database.set(drivername="postgresql+psycopg").render_as_string(
                hide_password=False
            ),
            "sqlite": f"sqlite:///{folder / 'lite.sqlite3'}",
            "folder": folder,
        }
    finally:
        connections.close_all()
        _drop_database(postgres_server, database)


@pytest.fixture(params=["default", "lite"], ids=["postgresql", "sqlite"])
def gaffer_alias(request: pytest.FixtureRequest, django_project: dict[str, Any]) -> Iterator[str]:
    """Each of Django's databases in turn as the Gaffer database, its Gaffer tables
    emptied; the Celery app pointed at it (and back at ``default`` after)."""
    app = project.use_alias(request.param)
    database = database_for(app)
    models = models_for(database.settings.table_prefix)
    with database.engine.begin() as conn:
        for table in reversed(models.metadata.sorted_tables):
            conn.execute(text(f"DELETE FROM {table.name}"))
    yield request.param
    project.use_alias("default")


@pytest.fixture
def celery_gaffer_app(gaffer_alias: str) -> Any:
    from .celery_app import app

    return app


@pytest.fixture
def empty_sqlite(django_project: dict[str, Any]) -> Iterator[Path]:
    """The alias ``empty`` as the Gaffer database: a SQLite file never migrated."""
    path = Path(django_project["folder"]) / "empty.sqlite3"
    dispose_engines()  # no pooled connection to an earlier test's file
    path.unlink(missing_ok=True)
    project.use_alias("empty")
    yield path
    from django.db import connections

    connections["empty"].close()
    dispose_engines()
    path.unlink(missing_ok=True)
    project.use_alias("default")
