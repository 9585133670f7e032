"""``gaffer_database_url = "django://<alias>"`` and ``CELERY_GAFFER_*`` settings, with
Django configured on real PostgreSQL and SQLite databases."""

from __future__ import annotations

from typing import Any

import pytest
from celery import Celery
from sqlalchemy.engine import make_url

import celery_gaffer
from celery_gaffer import GafferError, GafferTask
from celery_gaffer.exceptions import ConfigurationError
from celery_gaffer.settings import settings_for
from celery_gaffer.store import database_for


def gaffer_app(url: str) -> Celery:
    app = Celery("django-url-test", broker="memory://", set_as_current=False)
    app.conf.gaffer_database_url = url
    return app


def test_an_alias_names_djangos_database_with_its_credentials(
    django_project: dict[str, Any],
) -> None:
    url = settings_for(gaffer_app("django://default")).database_url
    expected = make_url(django_project["postgresql"])
    assert url.drivername == "postgresql+psycopg"
    assert (url.host, url.port, url.database, url.username) == (
        expected.host,
        expected.port or 5432,
        expected.database,
        expected.username,
    )
    lite = settings_for(gaffer_app("django://lite")).database_url
    assert (lite.drivername, lite.database) == (
        "sqlite",
        str(django_project["folder"] / "lite.sqlite3"),
    )


def test_the_gaffer_tables_are_reached_through_the_alias(django_project: dict[str, Any]) -> None:
    for alias in ("default", "lite"):
        app = gaffer_app(f"django://{alias}")
        celery_gaffer.install(app)
        database_for(app).check_ready()  # raises when the tables are missing or behind
        app.close()


def test_celery_gaffer_settings_are_read_under_the_celery_namespace(
    django_project: dict[str, Any],
) -> None:
    from django.test import override_settings

    with override_settings(CELERY_GAFFER_DATABASE_URL="django://lite", CELERY_GAFFER_MAX_CATCHUP=7):
        app = Celery("django-namespace-test", set_as_current=False)
        app.config_from_object("django.conf:settings", namespace="CELERY")
        settings = settings_for(app)
    assert settings.database_url.database == str(django_project["folder"] / "lite.sqlite3")
    assert settings.max_catchup == 7


def options_of(url: str) -> Any:
    return settings_for(gaffer_app(url)).database_url


@pytest.mark.usefixtures("django_project")
@pytest.mark.filterwarnings("ignore:Overriding setting DATABASES")
def test_libpq_options_are_passed_on_and_djangos_own_are_not() -> None:
    from django.conf import settings
    from django.test import override_settings

    databases = {
        **settings.DATABASES,
        "tls": {
            **settings.DATABASES["default"],
            "OPTIONS": {"sslmode": "disable", "connect_timeout": 5, "server_side_binding": True},
        },
    }
    with override_settings(DATABASES=databases):
        url = options_of("django://tls")
    assert dict(url.query) == {"sslmode": "disable", "connect_timeout": "5"}


@pytest.mark.usefixtures("django_project")
@pytest.mark.filterwarnings("ignore:Overriding setting DATABASES")
@pytest.mark.parametrize(
    ("entry", "message"),
    [
        (None, "has no alias 'other' (it has: default, empty, lite)"),
        ({"ENGINE": "django.db.backends.mysql", "NAME": "x"}, "uses django.db.backends.mysql"),
        ({"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}, "in-memory SQLite"),
        (
            {"ENGINE": "django.db.backends.postgresql", "NAME": "x", "PORT": "fivefour"},
            "['PORT'] is 'fivefour', not a port number",
        ),
    ],
)
def test_a_bad_alias_is_one_clear_error_naming_the_key(entry: Any, message: str) -> None:
    from django.conf import settings
    from django.test import override_settings

    databases = dict(settings.DATABASES)
    if entry is not None:
        databases["other"] = entry
    with override_settings(DATABASES=databases), pytest.raises(ConfigurationError) as raised:
        options_of("django://other")
    assert raised.value.field == "gaffer_database_url"
    assert message in str(raised.value)


def test_atomic_needs_a_django_alias_and_one_holding_the_gaffer_tables(
    django_project: dict[str, Any], tmp_path: Any
) -> None:
    app = gaffer_app(f"sqlite:///{tmp_path / 'elsewhere.sqlite3'}")
    celery_gaffer.install(app)
    database_for(app).migrate()
    errors: list[str] = []

    @app.task(base=GafferTask, bind=True, shared=False, name="t.where")
    def where(self: GafferTask, using: str | None) -> None:
        try:
            with self.atomic(using=using):
                pass
        except GafferError as exc:
            errors.append(str(exc))

    where.apply(args=(None,))
    where.apply(args=("lite",))
    assert "gaffer_database_url is not a Django database" in errors[0]
    assert "DATABASES['lite'] is not the Gaffer database" in errors[1]
    app.close()
