"""``gaffer_alert_webhook_url`` validation and masking, and the alert retry backoff."""

from __future__ import annotations

from datetime import timedelta

import pytest

from celery_gaffer import ConfigurationError
from celery_gaffer.beat.alerts import retry_delay
from celery_gaffer.settings import GafferSettings


def test_the_webhook_is_off_by_default() -> None:
    settings = GafferSettings.from_conf({})
    assert settings.alert_webhook_url is None
    assert settings.masked_alert_webhook_url is None


def test_a_webhook_url_is_kept_and_masked_for_logs() -> None:
    url = "https://hook:pa55word@alerts.example/in?token=t0ken&team=ops"
    settings = GafferSettings.from_conf({"gaffer_alert_webhook_url": f"  {url} "})
    assert settings.alert_webhook_url == url
    assert settings.masked_alert_webhook_url == "https://alerts.example/***"


@pytest.mark.parametrize(
    "value",
    ["", "ftp://alerts.example/in", "alerts.example/in", "http://", "http://h:99999/", 42],
)
def test_a_bad_webhook_url_raises_naming_the_key(value: object) -> None:
    with pytest.raises(ConfigurationError) as info:
        GafferSettings.from_conf({"gaffer_alert_webhook_url": value})
    assert str(info.value).startswith("gaffer_alert_webhook_url: ")
    assert info.value.field == "gaffer_alert_webhook_url"


def test_a_bad_webhook_url_error_masks_its_password() -> None:
    with pytest.raises(ConfigurationError) as info:
        GafferSettings.from_conf({"gaffer_alert_webhook_url": "ftp://u:pa55word@h/x"})
    assert "pa55word" not in str(info.value)


def test_retries_back_off_from_5_seconds_doubling_to_10_minutes() -> None:
    delays = [retry_delay(attempt).total_seconds() for attempt in range(1, 11)]
    assert delays == [5, 10, 20, 40, 80, 160, 320, 600, 600, 600]
    assert retry_delay(5000) == timedelta(minutes=10)


@pytest.mark.parametrize(
    "value",
    [
        "htps://hooks.example/services/T0/B0/s3cr3tPath",
        "https:/hooks.example/services/T0/B0/s3cr3tPath",
        "https://hooks.example:port/services/T0/B0/s3cr3tPath",
    ],
)
def test_a_mistyped_webhook_url_error_never_shows_its_path(value: str) -> None:
    with pytest.raises(ConfigurationError) as info:
        GafferSettings.from_conf({"gaffer_alert_webhook_url": value})
    assert "s3cr3tPath" not in str(info.value)
    assert "***" in str(info.value)
