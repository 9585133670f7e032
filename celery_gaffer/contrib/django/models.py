"""Read-only, unmanaged Django models of three Gaffer tables, for the admin.

Alembic owns the tables (``python manage.py gaffer migrate``): these models have
``managed = False`` and the app ships no Django migration. Their table names carry the
Celery app's ``gaffer_table_prefix``, read when Django imports this module (app
loading); a prefix that does not parse falls back to ``gaffer_`` and system check
``gaffer.E001`` reports it. Rows are read on the Gaffer database's alias (the admin
calls ``using(alias)``); every change goes through ``ScheduleStore``, never the ORM.
"""

from __future__ import annotations

import json
from typing import Any

from django.db import models

from ...exceptions import GafferError
from ...protocol import KEY_LENGTH, NAME_LENGTH, PING_URL_LENGTH
from .conf import table_prefix


def _prefix() -> str:
    try:
        return table_prefix()
    except GafferError:
        return "gaffer_"


PREFIX = _prefix()


class StoredJSON(models.TextField):  # type: ignore[misc]  # Django ships no type hints
    """A Gaffer JSON column, read: PostgreSQL's ``json`` arrives decoded by psycopg,
    SQLite's as text. Never written through Django."""

    def from_db_value(self, value: Any, expression: Any, connection: Any) -> Any:
        if isinstance(value, (str, bytes)):
            try:
                return json.loads(value)
            except ValueError:
                return value  # a hand-corrupted row is still listed
        return value


class Schedule(models.Model):  # type: ignore[misc]
    """A row of ``{prefix}schedules``."""

    id = models.BigIntegerField(primary_key=True)
    name = models.CharField(max_length=NAME_LENGTH, unique=True)
    task = models.CharField(max_length=255)
    schedule = StoredJSON()
    args = StoredJSON()
    kwargs = StoredJSON()
    options = StoredJSON()
    catchup = models.CharField(max_length=8)
    starting_deadline = models.FloatField(null=True)
    overlap = models.CharField(max_length=8)
    grace = models.FloatField(null=True)
    enabled = models.BooleanField()
    source = models.CharField(max_length=8)
    watermark_at = models.DateTimeField()
    next_fire_at = models.DateTimeField(null=True)
    error = models.TextField(null=True)
    start_at = models.DateTimeField(null=True)
    end_at = models.DateTimeField(null=True)
    max_runs = models.IntegerField(null=True)
    fired_count = models.IntegerField()
    ping_url = models.CharField(max_length=PING_URL_LENGTH, null=True)
    health = models.CharField(max_length=8)
    check_at = models.DateTimeField(null=True)
    consecutive_failures = models.IntegerField()
    paused_note = models.TextField(null=True)
    paused_until = models.DateTimeField(null=True)
    last_success_at = models.DateTimeField(null=True)
    last_success_nominal_at = models.DateTimeField(null=True)
    created_at = models.DateTimeField()
    updated_at = models.DateTimeField()

    class Meta:
        managed = False
        db_table = f"{PREFIX}schedules"
        ordering = ("name",)
        default_permissions = ("change", "view")

    def __str__(self) -> str:
        return str(self.name)

    @property
    def state(self) -> str:
        """``error``, ``paused``, ``done`` or ``enabled``, as ``gaffer schedules`` says."""
        if self.error:
            return "error"
        if not self.enabled:
            return "paused"
        return "done" if self.next_fire_at is None else "enabled"


class JobRun(models.Model):  # type: ignore[misc]
    """A row of ``{prefix}job_runs``: one delivery of a task."""

    id = models.BigIntegerField(primary_key=True)
    task_id = models.CharField(max_length=255)
    task_name = models.CharField(max_length=255)
    schedule = models.CharField(max_length=NAME_LENGTH, null=True)
    nominal_at = models.DateTimeField(null=True)
    key = models.CharField(max_length=KEY_LENGTH, null=True)
    attempt = models.IntegerField()
    state = models.CharField(max_length=12)
    started_at = models.DateTimeField(null=True)
    finished_at = models.DateTimeField(null=True)
    duration = models.FloatField(null=True)
    items = models.BigIntegerField(null=True)
    cursor = models.TextField(null=True)
    fence = models.BigIntegerField(null=True)
    lease = models.CharField(max_length=255, null=True)
    worker = models.CharField(max_length=255, null=True)
    error_type = models.CharField(max_length=255, null=True)
    error_message = models.TextField(null=True)
    next_run_at = models.DateTimeField(null=True)
    args = StoredJSON(null=True)
    kwargs = StoredJSON(null=True)
    traceback = models.TextField(null=True)
    updated_at = models.DateTimeField()
    created_at = models.DateTimeField()

    class Meta:
        managed = False
        db_table = f"{PREFIX}job_runs"
        ordering = ("-id",)
        default_permissions = ("view",)
        verbose_name = "run"

    def __str__(self) -> str:
        return f"{self.task_name} {self.task_id}"


class AuditEntry(models.Model):  # type: ignore[misc]
    """A row of ``{prefix}audit``: one change to a schedule."""

    id = models.BigIntegerField(primary_key=True)
    at = models.DateTimeField()
    actor = models.CharField(max_length=255)
    source = models.CharField(max_length=8)
    action = models.CharField(max_length=32)
    schedule = models.CharField(max_length=NAME_LENGTH, null=True)
    note = models.TextField(null=True)
    changes = StoredJSON()

    class Meta:
        managed = False
        db_table = f"{PREFIX}audit"
        ordering = ("-id",)
        default_permissions = ("view",)
        verbose_name = "audit entry"
        verbose_name_plural = "audit log"

    def __str__(self) -> str:
        return f"{self.action} {self.schedule or ''} by {self.actor}"
