"""Rows written through Django's ORM by the tests' tasks (tables made by ``migrate
--run-syncdb``: the app has no migrations)."""

from __future__ import annotations

from django.db import models


class Effect(models.Model):
    """One labelled effect of a run."""

    label = models.CharField(max_length=200)

    class Meta:
        app_label = "gaffer_tests"
        db_table = "gaffer_tests_effect"


class Item(models.Model):
    """A row a batch handles once (``handled`` counts how often)."""

    handled = models.IntegerField(default=0)

    class Meta:
        app_label = "gaffer_tests"
        db_table = "gaffer_tests_item"
