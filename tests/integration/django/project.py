"""The Django project of the in-process Django tests: one configuration per pytest process.

Django can be configured once per process, so every test that runs Django in the pytest
process lives in this folder and shares :func:`configure`'s settings through the
``django_project`` fixture (conftest.py): ``default`` is a fresh PostgreSQL database and
``lite`` a SQLite file, both with Django's own tables (auth, admin, sessions,
django-celery-beat) migrated; ``empty`` is a SQLite file nobody migrates. The Celery app
is :data:`celery_app.app`, its Gaffer database ``django://default`` unless a test
switches it (:func:`use_alias`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sqlalchemy.engine import URL

CELERY_APP = "tests.integration.django.celery_app:app"


def settings(default: URL, folder: Path) -> dict[str, Any]:
    """The settings of the test project, its PostgreSQL database ``default``."""
    return {
        "DEBUG": False,
        "SECRET_KEY": "tests-only-not-secret",
        "ALLOWED_HOSTS": ["testserver", "127.0.0.1", "localhost"],
        "DATABASES": {
            "default": {
                "ENGINE": "django.db.backends.postgresql",  # psycopg 3
                "NAME": default.database,
                "USER": default.username,
                "PASSWORD": default.password or "",
                "HOST": default.host,
                "PORT": default.port or 5432,
            },
            "lite": {"ENGINE": "django.db.backends.sqlite3", "NAME": str(folder / "lite.sqlite3")},
            "empty": {
                "ENGINE": "django.db.backends.sqlite3",
                "NAME": str(folder / "empty.sqlite3"),
            },
        },
        "INSTALLED_APPS": [
            "django.contrib.admin",
            "django.contrib.auth",
            "django.contrib.contenttypes",
            "django.contrib.sessions",
            "django.contrib.messages",
            "django_celery_beat",
            "celery_gaffer.contrib.django",
            "tests.djangoapp",
        ],
        "MIDDLEWARE": [
            "django.contrib.sessions.middleware.SessionMiddleware",
            "django.middleware.common.CommonMiddleware",
            "django.middleware.csrf.CsrfViewMiddleware",
            "django.contrib.auth.middleware.AuthenticationMiddleware",
            "django.contrib.messages.middleware.MessageMiddleware",
        ],
        "ROOT_URLCONF": "tests.integration.django.urls",
        "TEMPLATES": [
            {
                "BACKEND": "django.template.backends.django.DjangoTemplates",
                "APP_DIRS": True,
                "OPTIONS": {
                    "context_processors": [
                        "django.template.context_processors.request",
                        "django.contrib.auth.context_processors.auth",
                        "django.contrib.messages.context_processors.messages",
                    ]
                },
            }
        ],
        "USE_TZ": True,
        "TIME_ZONE": "UTC",
        "DEFAULT_AUTO_FIELD": "django.db.models.BigAutoField",
        "GAFFER_CELERY_APP": CELERY_APP,
    }


def use_alias(alias: str) -> Any:
    """Point the test Celery app's Gaffer database at Django's ``alias``; the app."""
    from celery_gaffer.settings import forget_settings

    from .celery_app import app

    app.conf.gaffer_database_url = f"django://{alias}"
    forget_settings(app)
    return app
