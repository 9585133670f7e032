"""Commands that look at the database: migrate, status, runs, cleanup."""

from __future__ import annotations

import json
import sys
from datetime import datetime

import click

from ..beat.health import all_health
from ..clock import utcnow
from ..protocol import Health
from ..store import database_for
from ..store import runs as run_rows
from ..store.retention import cleanup
from .base import app_of, gaffer, gaffer_errors, iso, ready, table, when


@gaffer.command()
@click.option(
    "--to",
    "target",
    default="head",
    show_default=True,
    help="Revision to upgrade or downgrade to; 'base' drops every Gaffer table.",
)
@click.pass_context
@gaffer_errors
def migrate(ctx: click.Context, target: str) -> None:
    """Create or upgrade the Gaffer tables (running it twice changes nothing)."""
    database = database_for(app_of(ctx))
    before, after = database.migrate(target)
    where = database.settings.masked_url
    if before == after:
        click.echo(f"{where}: already at revision {after or 'base'}, nothing to do")
    else:
        click.echo(f"{where}: migrated from {before or 'empty'} to revision {after or 'base'}")


@gaffer.command()
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line.")
@click.pass_context
@gaffer_errors
def status(ctx: click.Context, as_json: bool) -> None:
    """One line per schedule with its state: ok, late, failing, paused or error.

    Exits 1 when any schedule is late, failing or in error (use it as a probe or a cron
    check); the last column says why.
    """
    database = ready(ctx)
    with database.read() as conn:
        healths = all_health(conn, database.models, utcnow(), database.settings)
    if as_json:
        for h in healths:
            click.echo(
                json.dumps(
                    {
                        "schedule": h.schedule,
                        "state": h.state,
                        "last_success_at": iso(h.last_success_at),
                        "next_fire_at": iso(h.next_fire_at),
                        "consecutive_failures": h.consecutive_failures,
                        "late_since": iso(h.due_nominal_at) if h.state == Health.LATE else None,
                        "error": h.error,
                        "reason": h.reason,
                    }
                )
            )
    else:
        table(
            ("SCHEDULE", "STATE", "LAST SUCCESS", "NEXT RUN", "FAILURES", "REASON"),
            [
                (
                    h.schedule,
                    h.state,
                    when(h.last_success_at),
                    when(h.next_fire_at),
                    h.consecutive_failures,
                    h.reason,
                )
                for h in healths
            ],
            last_wide=True,
        )
        click.echo(f"{len(healths)} schedules; database {database.settings.masked_url}")
    if any(h.alerting for h in healths):
        sys.exit(1)


@gaffer.command()
@click.option("--schedule", "schedule_name", default=None, help="Only this schedule's runs.")
@click.option("--scheduled", is_flag=True, help="Only runs of schedules (not ad-hoc tasks).")
@click.option("--limit", type=click.IntRange(min=1), default=20, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line.")
@click.pass_context
@gaffer_errors
def runs(
    ctx: click.Context, schedule_name: str | None, scheduled: bool, limit: int, as_json: bool
) -> None:
    """The latest runs, newest first: schedule, nominal time, state, items, duration."""
    database = ready(ctx)
    with database.read() as conn:
        rows = run_rows.latest_runs(
            conn, database.models, limit=limit, schedule=schedule_name, scheduled_only=scheduled
        )
    if as_json:
        for row in rows:
            click.echo(
                json.dumps({k: iso(v) if isinstance(v, datetime) else v for k, v in row.items()})
            )
        return
    table(
        ("SCHEDULE", "NOMINAL", "TASK", "STATE", "ITEMS", "DURATION", "ERROR"),
        [
            (
                row["schedule"] or "-",
                when(row["nominal_at"]),
                row["task_name"],
                row["state"],
                "-" if row["items"] is None else row["items"],
                "-" if row["duration"] is None else f"{row['duration']:.2f}s",
                (row["error_type"] or "")
                + (f": {row['error_message']}" if row["error_message"] else ""),
            )
            for row in rows
        ],
    )


@gaffer.command(name="cleanup")
@click.pass_context
@gaffer_errors
def cleanup_command(ctx: click.Context) -> None:
    """Delete run records, ledger rows and completed keys past their retention."""
    database = ready(ctx)
    report = cleanup(database, utcnow())
    click.echo(f"deleted {report.runs} runs, {report.fires} ledger rows, {report.keys} keys")
