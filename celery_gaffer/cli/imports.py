"""``gaffer import ...``: schedules from other schedulers, with a dry run that shows the diff.

Exit status: 0 when every entry was imported (or is unchanged), 1 when some cannot be
mapped (the others are imported), 2 for an error (nothing written)."""

from __future__ import annotations

from pathlib import Path

import click

from ..importers.beat_schedule import import_beat_schedule, read_shelve
from ..importers.common import ImportReport
from .base import LINE_LIMIT, actor_option, app_of, echo, gaffer, gaffer_errors, store_of
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
    "starts from its entry's last run (only Celery's schedule classes, dates and "
    "containers are loaded from it; anything else refuses the file).",
)
@dry_run_option
@actor_option
@click.pass_context
@gaffer_errors
def beat_schedule(
    ctx: click.Context, shelve_path: Path | None, dry_run: bool, actor: str | None
) -> None:
    """Import app.conf.beat_schedule: crontab, schedule and numbers translated exactly.

    One line per entry: added, changed (which fields), unchanged, or cannot be mapped
    (with the reason), then a summary. Running it twice changes nothing the second time.
    Exit status 1 when some entries cannot be mapped (the others are imported).
    """
    app = app_of(ctx)
    last_runs = None if shelve_path is None else read_shelve(shelve_path)
    store = store_of(ctx, actor=actor)
    report = import_beat_schedule(
        store, app.conf.beat_schedule or {}, last_runs=last_runs, dry_run=dry_run
    )
    print_report(ctx, report)


def print_report(ctx: click.Context, report: ImportReport) -> None:
    """One line per entry and the summary; exit status 1 when some cannot be mapped."""
    for line in report.lines:
        echo(line.render(), limit=LINE_LIMIT)  # names and reasons come from the source
    click.echo(report.summary())
    if report.refused:
        ctx.exit(1)
