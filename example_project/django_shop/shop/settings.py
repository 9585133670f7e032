"""Settings of the shop: SQLite and kombu's filesystem broker under ``var/`` by default,
so that it runs with no server.

Environment:

* ``SHOP_DATABASE_URL``: a PostgreSQL database instead of SQLite,
  ``postgresql://user:password@host:5432/name``.
* ``CELERY_BROKER_URL``: a broker server (``redis://...``, ``amqp://...``) instead of
  the embedded filesystem broker.
* ``SHOP_VAR``: the folder of the SQLite file and the broker (default ``var`` here).
"""

import os
from pathlib import Path
from urllib.parse import unquote, urlsplit

import django

from celery_gaffer import cron

BASE_DIR = Path(__file__).resolve().parent.parent
VAR = Path(os.environ.get("SHOP_VAR", BASE_DIR / "var"))

SECRET_KEY = os.environ.get("SHOP_SECRET_KEY", "django-insecure-example-only-never-in-production")
DEBUG = os.environ.get("SHOP_DEBUG", "1") == "1"
ALLOWED_HOSTS = ["localhost", "127.0.0.1"]

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "celery_gaffer.contrib.django",  # manage.py gaffer, system checks, the admin's Gaffer section
    "orders",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "shop.urls"
WSGI_APPLICATION = "shop.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]


def _database() -> dict[str, object]:
    url = os.environ.get("SHOP_DATABASE_URL")
    if not url:
        VAR.mkdir(parents=True, exist_ok=True)
        options: dict[str, object] = {"timeout": 20}
        if django.VERSION >= (5, 1):
            # Take SQLite's write lock when a transaction begins: a worker and Beat write
            # the same file, and a deferred transaction that must upgrade its lock fails
            # at once with "database is locked" instead of waiting.
            options["transaction_mode"] = "IMMEDIATE"
        return {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": VAR / "shop.sqlite3",
            "OPTIONS": options,
            # manage.py test: a file, which Gaffer's engine can open (not Django's default
            # in-memory test database, which no other connection sees).
            "TEST": {"NAME": VAR / "test_shop.sqlite3"},
        }
    parts = urlsplit(url)
    return {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": unquote(parts.path.lstrip("/")),
        "USER": unquote(parts.username or ""),
        "PASSWORD": unquote(parts.password or ""),
        "HOST": parts.hostname or "",
        "PORT": str(parts.port or ""),
    }


DATABASES = {"default": _database()}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True
STATIC_URL = "static/"

# Celery: every CELERY_* setting is read by app.config_from_object(..., namespace="CELERY")
# in shop/celery.py, Gaffer's gaffer_* keys as CELERY_GAFFER_*.
CELERY_BROKER_URL = os.environ.get("CELERY_BROKER_URL", "filesystem://")
if CELERY_BROKER_URL == "filesystem://":
    # kombu's filesystem transport, each message written whole before a worker sees it.
    CELERY_BROKER_TRANSPORT = "shop.broker:Transport"
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "data_folder_in": str(VAR / "broker" / "queue"),
        "data_folder_out": str(VAR / "broker" / "queue"),
        "control_folder": str(VAR / "broker" / "control"),
        "processed_folder": str(VAR / "broker" / "processed"),
        "store_processed": False,
    }
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]

# The Gaffer tables live in DATABASES["default"], next to the orders.
CELERY_GAFFER_DATABASE_URL = "django://default"
# manage.py migrate (and so the test runner's test database) makes the Gaffer tables too.
GAFFER_MIGRATE_WITH_DJANGO = True
# manage.py test: closes Gaffer's own connections to the test database before Django
# drops it (PostgreSQL refuses to drop a database that has connections).
TEST_RUNNER = "celery_gaffer.contrib.django.testing.GafferTestRunner"
CELERY_GAFFER_LEASE_TTL = 30

CELERY_BEAT_SCHEDULE = {
    # 03:00 in London, every night: cancel the orders left unpaid for a week.
    "expire-unpaid-orders": {
        "task": "orders.tasks.expire_unpaid_orders",
        "schedule": cron("0 3 * * *", "Europe/London"),
        "gaffer": {"catchup": "latest", "overlap": "forbid"},
    },
}
