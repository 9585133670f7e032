from __future__ import annotations

from datetime import timedelta

import pytest
from celery import Celery

from celery_gaffer import ConfigurationError, GafferError
from celery_gaffer.settings import GafferSettings, mask_url, parse_database_url, settings_for


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
