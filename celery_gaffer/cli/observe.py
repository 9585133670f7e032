"""Commands that look at the database: migrate, status, runs, audit, cleanup."""

from __future__ import annotations

import json
import sys
from datetime import datetime
from typing import Any

import click

from ..beat.survey import LAST_SUCCESS_AT, NAME, SCHEDULE, states
from ..clock import utcnow
from ..exceptions import GafferError
from ..readable import run_reason
from ..schedules.cron_engine import load_zone
from ..schedules.kinds import Cron, schedule_from_dict
from ..store import database_for
from ..store import runs as run_rows
from ..store.audit import AuditEntry
from ..store.retention import cleanup
from ..store.schedule_rows import decode_json
from .base import app_of, echo, gaffer, gaffer_errors, iso, ready, store_of, table
from .status_lines import Formats, Tally, echo_batches, table_lines
from .times import earlier_option, utc_option, when, zone_of


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
@click.option("--problems", is_flag=True, help="Only the schedules that are not ok.")
@utc_option
@click.pass_context
@gaffer_errors
def status(ctx: click.Context, as_json: bool, problems: bool, in_utc: bool) -> None:
    """One line per schedule with its state: ok, late, failing, paused or error.

    Exits 1 when any schedule is late, failing or in error (use it as a probe or a cron
    check); the last column says why: the nominal fire that has not succeeded, the
    failed runs, or the error. Times of a cron schedule in a zone other than UTC are
    shown in that zone next to UTC (--utc: in UTC only). --problems leaves out the
    schedules that are ok (the exit status is the same).
    """
    database = ready(ctx)
    settings = database.settings
    seen = Tally()
    formats = Formats(in_utc=in_utc)
    with database.read() as conn:
        surveyed = seen.count(states(conn, database.models, utcnow(), settings), problems)
        if as_json:
            echo_batches(
                formats.json_of(row[NAME], row[LAST_SUCCESS_AT], health) for row, health in surveyed
            )
        else:
            cells = formats.cells_of
            echo_batches(
                table_lines(
                    cells(row[NAME], row[LAST_SUCCESS_AT], row[SCHEDULE], health)
                    for row, health in surveyed
                )
            )
    if not as_json:
        counted = f"{seen.shown} of {seen.total}" if problems else str(seen.total)
        not_ok = " not ok" if problems else ""
        click.echo(f"{counted} schedules{not_ok}; database {settings.masked_url}")
    if seen.alerting:
        sys.exit(1)


@gaffer.command()
@click.option("--schedule", "schedule_name", default=None, help="Only this schedule's runs.")
@click.option("--scheduled", is_flag=True, help="Only runs of schedules (not ad-hoc tasks).")
@click.option(
    "--limit", type=click.IntRange(min=1), default=20, show_default=True, help="Runs to show."
)
@click.option("--wide", is_flag=True, help="Also TASK ID, FENCE, WORKER, times and ATTEMPT.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line, every column.")
@utc_option
@click.pass_context
@gaffer_errors
def runs(
    ctx: click.Context,
    schedule_name: str | None,
    scheduled: bool,
    limit: int,
    wide: bool,
    as_json: bool,
    in_utc: bool,
) -> None:
    """The latest runs, newest first: schedule, nominal time, task, state, items,
    duration, idempotency key and reason (the error, or why the run was skipped,
    duplicate, fence_lost, missed or lost).

    Times of a cron schedule in a zone other than UTC are shown in that zone next to UTC
    (--utc: in UTC only); ad-hoc runs and runs of removed schedules in UTC.
    """
    database = ready(ctx)
    with database.read() as conn:
        rows = run_rows.latest_runs(
            conn, database.models, limit=limit, schedule=schedule_name, scheduled_only=scheduled
        )
    for row in rows:
        definition = row.pop("schedule_definition")
        row["zone"] = _zone_name(definition)
        row["reason"] = run_reason(row)
    if as_json:
        for row in rows:
            click.echo(
                json.dumps({k: iso(v) if isinstance(v, datetime) else v for k, v in row.items()})
            )
        return
    header: tuple[str, ...] = ("SCHEDULE", "NOMINAL", "TASK", "STATE", "ITEMS", "DURATION", "KEY")
    if wide:
        header += ("TASK ID", "FENCE", "WORKER", "STARTED", "FINISHED", "ATTEMPT")
    cells = []
    for row in rows:
        zone = None if in_utc or row["zone"] == "UTC" else load_zone(row["zone"])
        cell: tuple[Any, ...] = (
            row["schedule"] or "-",
            when(row["nominal_at"], zone),
            row["task_name"],
            row["state"],
            "-" if row["items"] is None else row["items"],
            "-" if row["duration"] is None else f"{row['duration']:.2f}s",
            row["key"] or "-",
        )
        if wide:
            cell += (
                row["task_id"],
                "-" if row["fence"] is None else row["fence"],
                row["worker"] or "-",
                when(row["started_at"], zone),
                when(row["finished_at"], zone),
                row["attempt"],
            )
        cells.append((*cell, row["reason"]))
    table((*header, "REASON"), cells, last_wide=True)


def _zone_name(definition: str | None) -> str:
    """The IANA zone a run's times are shown in: its schedule's, or UTC."""
    try:
        schedule = schedule_from_dict(decode_json(definition)) if definition else None
    except (GafferError, ValueError, TypeError):
        return "UTC"
    zone = zone_of(schedule)
    return "UTC" if zone is None or not isinstance(schedule, Cron) else schedule.tz


@gaffer.command(name="cleanup")
@click.pass_context
@gaffer_errors
def cleanup_command(ctx: click.Context) -> None:
    """Delete run records, ledger rows and completed keys past their retention."""
    database = ready(ctx)
    report = cleanup(database, utcnow())
    click.echo(
        f"deleted {report.runs} runs, {report.fires} ledger rows, {report.keys} keys,"
        f" {report.alerts} alerts"
    )


@gaffer.command()
@click.argument("name", required=False)
@click.option(
    "--since",
    "since_text",
    metavar="TIME",
    help="Only entries at or after this time: a duration before now (2h, 30m, 1d) or ISO "
    "8601 (without an offset: UTC).",
)
@click.option(
    "--limit",
    type=click.IntRange(min=1),
    default=100,
    show_default=True,
    help="At most this many entries.",
)
@click.option("--json", "as_json", is_flag=True, help="A JSON list of entries.")
@click.pass_context
@gaffer_errors
def audit(
    ctx: click.Context, name: str | None, since_text: str | None, limit: int, as_json: bool
) -> None:
    """The audit log, newest first: every change to schedule NAME (or to all).

    One line per entry: when, who (the actor), through what (the source: cli, api,
    console, config, import, code or beat), the action, the schedule, the note and each
    changed field as before -> after. --json prints a list of objects with the keys at,
    actor, source, action, schedule, note and changes ({field: [before, after]}).
    """
    since = None if since_text is None else earlier_option(since_text, "--since", utcnow())
    found = store_of(ctx, check_tasks=False).audit(name, since=since, limit=limit)
    if as_json:
        echo(json.dumps([entry.as_json() for entry in found]))
        return
    table(
        ("AT", "ACTOR", "SOURCE", "ACTION", "SCHEDULE", "NOTE", "CHANGES"),
        [
            (
                when(entry.at),
                entry.actor,
                entry.source,
                entry.action,
                entry.schedule or "-",
                entry.note or "-",
                changes_text(entry),
            )
            for entry in found
        ],
        last_wide=True,
    )


def changes_text(entry: AuditEntry) -> str:
    """Each changed field as ``field: before -> after``, values in compact JSON."""
    if not entry.changes:
        return "-"
    return "; ".join(
        f"{field}: {_compact(pair[0])} -> {_compact(pair[1])}"
        for field, pair in entry.changes.items()
    )


def _compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), sort_keys=True)
