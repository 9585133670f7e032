"""``gaffer import django-celery-beat``: django-celery-beat's periodic tasks as db schedules."""

from __future__ import annotations

import click

from ..importers.django_celery_beat import import_django_celery_beat, read_tables
from .base import actor_option, gaffer_errors, store_of
from .imports import import_, print_report
from .update import dry_run_option


@import_.command("django-celery-beat")
@click.option(
    "--database-url",
    required=True,
    help="The database holding django-celery-beat's tables (postgresql+psycopg://... or "
    "sqlite:///path); only read. Naive times in it are read as UTC (Django's USE_TZ).",
)
@dry_run_option
@actor_option
@click.pass_context
@gaffer_errors
def django_celery_beat(
    ctx: click.Context, database_url: str, dry_run: bool, actor: str | None
) -> None:
    """Import django-celery-beat's periodic tasks as its Beat runs them.

    Crontab rows in their own zone, intervals anchored at the last run, clocked rows as
    one-off at(...), enabled, start_time, expires, one_off and the send options; the
    last run becomes the watermark. One line per task: added, changed (which fields),
    unchanged, or cannot be mapped (with the reason), then a summary. Running it twice
    changes nothing the second time.
    Exit status 1 when some entries cannot be mapped (the others are imported).
    """
    tables = read_tables(database_url)
    store = store_of(ctx, actor=actor)
    report = import_django_celery_beat(store, tables, dry_run=dry_run)
    print_report(ctx, report)
