"""The Django system checks of the Gaffer app (registered by ``GafferConfig.ready``).

``gaffer.E001``: the Celery app's Gaffer settings do not parse (the message names the
key); ``gaffer.E002``: ``GAFFER_CELERY_APP`` names no Celery app; ``gaffer.W003``:
``gaffer_database_url`` is not ``django://<alias>``, so the admin cannot read the Gaffer
tables. None of these opens a connection.

With ``--database <alias>`` (``manage.py check --database default``, and ``migrate``),
when the alias is the Gaffer database's, the tables' revision is read, as the command
line and Beat read it: ``gaffer.W001`` missing, ``gaffer.W002`` behind this release,
``gaffer.W004`` ahead of it (migrated by a newer release), ``gaffer.E003`` unreachable.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core import checks
from sqlalchemy.exc import SQLAlchemyError

from ...exceptions import GafferError
from ...settings import settings_for
from ...store import database_for
from ...store.database import driver_reason
from ...store.migrate import current_revision, head_revision, known_revisions
from .conf import SETTING, celery_app, gaffer_alias

MIGRATE = "run `python manage.py gaffer migrate`"


def check_configuration(app_configs: Any = None, **kwargs: Any) -> list[Any]:
    """The Celery app loads, its Gaffer settings parse, and the admin can read them."""
    try:
        app = celery_app()
    except GafferError as exc:
        return [checks.Error(str(exc), hint=f"set {SETTING} = 'proj.celery:app'", id="gaffer.E002")]
    try:
        settings_for(app)
    except GafferError as exc:
        return [checks.Error(str(exc), id="gaffer.E001")]
    if gaffer_alias(app) is None:
        return [
            checks.Warning(
                "gaffer_database_url is not one of Django's databases: the admin cannot "
                "read the Gaffer tables",
                hint='set CELERY_GAFFER_DATABASE_URL = "django://default" (any alias of '
                "DATABASES after django://)",
                id="gaffer.W003",
            )
        ]
    return []


def check_tables(app_configs: Any = None, databases: Any = None, **kwargs: Any) -> list[Any]:
    """With ``--database`` naming the Gaffer database's alias: its tables' revision."""
    if not databases:
        return []
    try:
        app = celery_app()
        alias = gaffer_alias(app)
        if alias is None or alias not in databases:
            return []
        database = database_for(app)
    except GafferError:
        return []  # check_configuration says why
    url = database.settings.database_url
    if url.get_backend_name() == "sqlite" and not Path(str(url.database)).exists():
        current = None  # no file: nothing migrated (and reading it would create it)
    else:
        try:
            current = current_revision(database.engine, database.settings.table_prefix)
        except SQLAlchemyError as exc:
            return [
                checks.Error(
                    f"cannot read the Gaffer tables of database {alias!r}: {driver_reason(exc)}",
                    id="gaffer.E003",
                )
            ]
    return revision_messages(current, head_revision())


def revision_messages(current: str | None, head: str) -> list[Any]:
    """The warning for tables at revision ``current`` when this release needs ``head``."""
    if current == head:
        return []
    if current is None:
        return [
            checks.Warning(
                f"the Gaffer tables are missing: {MIGRATE}", hint=MIGRATE, id="gaffer.W001"
            )
        ]
    if current not in known_revisions():
        return [
            checks.Warning(
                f"the Gaffer tables are at revision {current}, which this release does not "
                "know: a newer celery-gaffer migrated them",
                hint="run that release, or its `gaffer migrate --to` to go back",
                id="gaffer.W004",
            )
        ]
    return [
        checks.Warning(
            f"the Gaffer tables are behind (revision {current}, this release needs {head}): "
            f"{MIGRATE}",
            hint=MIGRATE,
            id="gaffer.W002",
        )
    ]
