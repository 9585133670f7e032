"""``gaffer import ...``: schedules from other schedulers, with a dry run that shows the diff."""

from __future__ import annotations

from pathlib import Path

import click

from ..importers.beat_schedule import import_beat_schedule, read_shelve
from .base import app_of, gaffer, gaffer_errors, store_of
from .update import dry_run_option


@gaffer.group("import")
def import_() -> None:
    """Import schedules from another scheduler as schedules of source db."""


@import_.command("beat-schedule")
@click.option(
    "--shelve",
    "shelve_path",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="A celerybeat-schedule file of Celery's PersistentScheduler: each new schedule "
    "starts from its entry's last run (the file is pickle-based: read only your own).",
)
@dry_run_option
@click.pass_context
@gaffer_errors
def beat_schedule(ctx: click.Context, shelve_path: Path | None, dry_run: bool) -> None:
    """Import app.conf.beat_schedule: crontab, schedule and numbers translated exactly.

    One line per entry: added, changed (which fields), unchanged, or cannot be mapped
    (with the reason), then a summary. Running it twice changes nothing the second time.
    """
    app = app_of(ctx)
    last_runs = None if shelve_path is None else read_shelve(shelve_path)
    store = store_of(ctx)
    report = import_beat_schedule(
        store, app.conf.beat_schedule or {}, last_runs=last_runs, dry_run=dry_run
    )
    for line in report.lines:
        click.echo(line.render())
    click.echo(report.summary())
