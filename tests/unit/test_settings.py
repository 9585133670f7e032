from __future__ import annotations

from datetime import timedelta

import pytest
from celery import Celery
from celery.app.utils import filter_hidden_settings

from celery_gaffer import ConfigurationError, GafferError, install
from celery_gaffer.settings import (
    GafferSettings,
    mask_url,
    masked_ping_url,
    parse_database_url,
    settings_for,
)
from celery_gaffer.wiring import is_installed


def test_defaults_match_the_contract() -> None:
    settings = GafferSettings.from_conf({})
    assert settings.database_url.render_as_string() == "sqlite:///gaffer.sqlite3"
    assert settings.table_prefix == "gaffer_"
    assert settings.lease_ttl == 60.0
    assert settings.republish_after == 30.0
    assert settings.max_catchup == 100
    assert settings.alert_after_failures == 3
    assert settings.metrics_port is None
    assert settings.partition_interval == 7 * 86400.0


def test_values_are_read_from_app_conf_once() -> None:
    app = Celery("settings-test", set_as_current=False)
    app.conf.gaffer_lease_ttl = timedelta(seconds=90)
    app.conf.gaffer_max_catchup = 7
    app.conf.gaffer_database_url = "postgresql://u:secret@db.example/prod"
    first = settings_for(app)
    app.conf.gaffer_max_catchup = 9
    assert settings_for(app) is first
    assert first.lease_ttl == 90.0
    assert first.max_catchup == 7
    assert first.database_url.drivername == "postgresql+psycopg"
    assert "secret" not in first.masked_url
    with pytest.raises(AttributeError):
        first.max_catchup = 3  # type: ignore[misc]


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("gaffer_lease_ttl", -5),
        ("gaffer_lease_ttl", "soon"),
        ("gaffer_lease_ttl", float("nan")),
        ("gaffer_republish_after", 0),
        ("gaffer_partition_interval", 60),
        ("gaffer_partition_interval", "weekly"),
        ("gaffer_max_catchup", 0),
        ("gaffer_max_catchup", 2.5),
        ("gaffer_alert_after_failures", True),
        ("gaffer_metrics_port", 70000),
        ("gaffer_metrics_port", "9100"),
        ("gaffer_table_prefix", "Bad-Prefix"),
        ("gaffer_table_prefix", ""),
        ("gaffer_database_url", "not a url at all"),
        ("gaffer_database_url", "mysql://root@localhost/db"),
        ("gaffer_database_url", "postgresql+psycopg2://u@h/db"),
        ("gaffer_database_url", 42),
    ],
)
def test_bad_values_raise_a_gaffer_error_naming_the_key(key: str, value: object) -> None:
    with pytest.raises(ConfigurationError) as info:
        GafferSettings.from_conf({key: value})
    assert isinstance(info.value, GafferError)
    assert info.value.field == key
    assert key in str(info.value)


def test_unparsable_url_error_does_not_echo_the_password() -> None:
    with pytest.raises(ConfigurationError) as info:
        parse_database_url("postgresql://user:hunter2@:::bad::/x?")
    assert "hunter2" not in str(info.value)


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        (
            "postgresql+psycopg://app:s3cret@db:5432/jobs",
            "postgresql+psycopg://app:***@db:5432/jobs",
        ),
        ("sqlite:///gaffer.sqlite3", "sqlite:///gaffer.sqlite3"),
        ("postgresql://app@db/jobs", "postgresql://app@db/jobs"),
    ],
)
def test_mask_url(url: str, expected: str) -> None:
    assert mask_url(url) == expected


@pytest.mark.parametrize(
    ("url", "secret"),
    [
        ("postgresql+psycopg://alice@host/db?password=S3cretPW", "S3cretPW"),
        ("postgresql+psycopg://alice:S3cretPW@host/db?sslpassword=Other1", "Other1"),
        ("postgresql+psycopg://alice:S3cretPW@host/db", "S3cretPW"),
        ("postgresql://alice:p@ssW0rd@host/db", "ssW0rd"),
        ("postgresql://alice:S3cret/PW@host:notaport/db", "S3cret"),
    ],
)
def test_every_rendering_of_a_url_masks_its_secrets(url: str, secret: str) -> None:
    assert secret not in mask_url(url)
    shown = ""
    try:
        shown = GafferSettings.from_conf({"gaffer_database_url": url}).masked_url
    except ConfigurationError as exc:
        shown = str(exc)
    assert secret not in shown


def test_a_table_prefix_in_sqlites_own_namespace_is_refused() -> None:
    with pytest.raises(ConfigurationError) as info:
        GafferSettings.from_conf({"gaffer_table_prefix": "sqlite_"})
    assert info.value.field == "gaffer_table_prefix"


@pytest.mark.parametrize(
    ("written", "meant"),
    [
        ("postgres://app@db.example/jobs", "postgresql+psycopg://app@db.example/jobs"),
        ("postgresql://app@db.example/jobs", "postgresql+psycopg://app@db.example/jobs"),
        ("postgres+psycopg://app@db/jobs", "postgresql+psycopg://app@db/jobs"),
        (
            "postgres://app:s3cret@db.example:6543/jobs?sslmode=require",
            "postgresql+psycopg://app:s3cret@db.example:6543/jobs?sslmode=require",
        ),
        ("sqlite:///gaffer.sqlite3", "sqlite:///gaffer.sqlite3"),
        ("sqlite://", "sqlite://"),
    ],
)
def test_urls_as_users_write_them(written: str, meant: str) -> None:
    assert parse_database_url(written).render_as_string(hide_password=False) == meant


def test_another_postgres_driver_is_refused_by_its_name() -> None:
    with pytest.raises(ConfigurationError) as info:
        parse_database_url("postgres+psycopg2://app@db/jobs")
    assert "'postgresql+psycopg2' is not supported" in str(info.value)
    assert info.value.field == "gaffer_database_url"


@pytest.mark.parametrize(
    "mistyped",
    [
        "postgresql:/app:Hunter2Secret@db.example/jobs",
        "postgresql//app:Hunter2Secret@db.example/jobs",
        "app:Hunter2Secret@db.example/jobs",
        "postgresql:app:Hunter2Secret@db.example/jobs",
        "Hunter2Secret@db.example/jobs",
        "postgres://app:Hunter2Secret@db.example:port/jobs",
    ],
)
def test_a_mistyped_url_is_never_echoed_with_its_password(mistyped: str) -> None:
    with pytest.raises(ConfigurationError) as info:
        GafferSettings.from_conf({"gaffer_database_url": mistyped})
    assert "Hunter2Secret" not in str(info.value)
    assert str(info.value).startswith("gaffer_database_url: ")
    assert "Hunter2Secret" not in mask_url(mistyped)


def test_a_webhook_url_is_logged_as_scheme_and_host_only() -> None:
    url = "https://hook:pa55@hooks.slack.example/services/T0/B0/XyZsecret?token=t"
    settings = GafferSettings.from_conf({"gaffer_alert_webhook_url": url})
    assert settings.masked_alert_webhook_url == "https://hooks.slack.example/***"
    assert masked_ping_url("https://u:pw@hc-ping.example:8443/uuid-secret") == (
        "https://hc-ping.example:8443/***"
    )
    assert masked_ping_url("https://[::1/broken") == "***"


def test_the_webhook_has_a_second_name_that_celery_report_hides() -> None:
    url = "https://hooks.example/services/T0/B0/XyZsecret"
    settings = GafferSettings.from_conf({"gaffer_alert_webhook_secret_url": url})
    assert settings.alert_webhook_url == url
    shown = filter_hidden_settings(
        {"gaffer_alert_webhook_secret_url": url, "gaffer_database_url": "postgres://u:p@h/d"}
    )
    assert set(shown.values()) == {"********"}


def test_the_webhook_is_set_under_one_name_only() -> None:
    url = "https://hooks.example/in"
    with pytest.raises(ConfigurationError) as info:
        GafferSettings.from_conf(
            {"gaffer_alert_webhook_url": url, "gaffer_alert_webhook_secret_url": url}
        )
    assert info.value.field == "gaffer_alert_webhook_secret_url"
    with pytest.raises(ConfigurationError) as bad:
        GafferSettings.from_conf({"gaffer_alert_webhook_secret_url": "ftp://u:PW1@h/x"})
    assert bad.value.field == "gaffer_alert_webhook_secret_url"
    assert "PW1" not in str(bad.value)


def test_install_defers_a_bad_setting_to_its_first_use_which_names_the_key() -> None:
    """install() runs while Celery imports the app, where an error is Celery's traceback:
    it reads no setting; the first use (a worker's or Beat's start, a command) does."""
    app = Celery("install-test", set_as_current=False)
    app.conf.gaffer_database_url = "postgresql:/app:Hunter2Secret@db/jobs"
    install(app)
    assert is_installed(app)
    with pytest.raises(ConfigurationError) as info:
        settings_for(app)
    assert info.value.field == "gaffer_database_url"
    assert "Hunter2Secret" not in str(info.value)
