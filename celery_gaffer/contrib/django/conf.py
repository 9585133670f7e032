"""Which Celery app the Django app serves, and which of Django's databases it reads.

The app is named by the Django setting ``GAFFER_CELERY_APP`` (``"proj.celery:app"`` or
``"proj.celery.app"``); without it, Celery's current app: the one a project's
``proj/__init__.py`` imports, as Celery's "First steps with Django" sets it up.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

from ...django_database import django_alias
from ...exceptions import ConfigurationError
from ...settings import table_prefix_of

SETTING = "GAFFER_CELERY_APP"


def celery_app() -> Any:
    """The Celery app of ``GAFFER_CELERY_APP``, or ``celery.current_app``; raise
    ConfigurationError naming the setting when the path does not lead to a Celery app."""
    from django.conf import settings

    path = getattr(settings, SETTING, None)
    if path is None:
        from celery.app import app_or_default

        # The app itself, not the current_app proxy: caches are keyed by app.
        app = app_or_default()
        wanted = getattr(settings, "CELERY_GAFFER_DATABASE_URL", None)
        if wanted is not None and app.conf.get("gaffer_database_url") != wanted:
            # Celery's fallback app, or another one: not the project's.
            raise ConfigurationError(
                f"{SETTING}: Celery's current app ({app.main}) does not read the Django "
                "settings (its gaffer_database_url is not CELERY_GAFFER_DATABASE_URL); "
                "import your Celery app in your project's __init__.py, as Celery's "
                f"Django guide does, or set {SETTING} = 'proj.celery:app'",
                field=SETTING,
            )
        return app
    return _load(path)


def _load(path: Any) -> Any:
    from celery import Celery

    if not isinstance(path, str) or not path.strip():
        raise ConfigurationError(
            f"{SETTING}: expected a dotted path such as 'proj.celery:app', got {path!r}",
            field=SETTING,
        )
    module_name, colon, attribute = path.strip().partition(":")
    if not colon:
        module_name, _, attribute = module_name.rpartition(".")
    if not module_name or not attribute:
        raise ConfigurationError(
            f"{SETTING}: {path!r} names no attribute of a module ('proj.celery:app')",
            field=SETTING,
        )
    try:
        module = import_module(module_name)
    except ImportError as exc:
        raise ConfigurationError(
            f"{SETTING}: cannot import {module_name!r} of {path!r}: {exc}", field=SETTING
        ) from exc
    app = getattr(module, attribute, None)
    if not isinstance(app, Celery):
        found = "nothing" if app is None else type(app).__name__
        raise ConfigurationError(f"{SETTING}: {path!r} is {found}, not a Celery app", field=SETTING)
    return app


def gaffer_alias(app: Any | None = None) -> str | None:
    """The Django database alias of the app's ``gaffer_database_url`` when it is
    ``django://<alias>``; None for any other URL (the admin then cannot read it)."""
    app = celery_app() if app is None else app
    return django_alias(app.conf.get("gaffer_database_url"))


def table_prefix(app: Any | None = None) -> str:
    """The app's ``gaffer_table_prefix`` (validated). Only that key is read: the other
    settings, the database URL among them, are read when first used (under Django's test
    runner, once the test databases have replaced the others)."""
    return table_prefix_of((celery_app() if app is None else app).conf)
