from __future__ import annotations

from django.apps import AppConfig


class TestAppConfig(AppConfig):
    name = "tests.djangoapp"
    label = "gaffer_tests"
    default_auto_field = "django.db.models.BigAutoField"
