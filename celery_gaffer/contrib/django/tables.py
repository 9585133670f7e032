"""``GAFFER_MIGRATE_WITH_DJANGO = True``: ``manage.py migrate`` migrates the Gaffer tables
too, on the Gaffer database's alias (the same as ``manage.py gaffer migrate``).

Django's test runner migrates each test database it creates, so with this setting the
Gaffer tables are made there as well. Off by default: Alembic owns the tables, and
``manage.py gaffer migrate`` stays the explicit way.
"""

from __future__ import annotations

from typing import Any

from ...store import database_for
from .conf import celery_app, gaffer_alias

SETTING = "GAFFER_MIGRATE_WITH_DJANGO"


def migrate_gaffer_tables(sender: Any, using: str, verbosity: int = 1, **_: Any) -> None:
    """Django's ``post_migrate`` receiver (connected by the app's ``ready()``)."""
    from django.conf import settings

    if not getattr(settings, SETTING, False):
        return
    app = celery_app()
    if gaffer_alias(app) != using:
        return
    database = database_for(app)
    before, after = database.migrate()
    if verbosity and before != after:
        print(
            f"  Gaffer tables of {database.settings.masked_url}: migrated from "
            f"{before or 'empty'} to revision {after}"
        )
