"""``celery -A proj gaffer <command>``: the command line, a thin layer over the API."""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any, TypeVar

import click
from sqlalchemy.exc import SQLAlchemyError

from .beat.health import all_health
from .clock import utcnow
from .exceptions import GafferError
from .protocol import Health
from .schedule_store import ScheduleStore
from .schedules.kinds import Cron, Every, cron, every
from .schedules.spec import CATCHUP_POLICIES, OVERLAP_POLICIES
from .store import Database, database_for
from .store import runs as run_rows
from .store.database import driver_reason
from .store.retention import cleanup
from .store.schedule_rows import StoredSchedule

F = TypeVar("F", bound=Callable[..., Any])


def _app(ctx: click.Context) -> Any:
    obj = ctx.find_root().obj
    app = getattr(obj, "app", None)
    if app is None:
        raise click.UsageError("run this as `celery -A proj gaffer ...`")
    return app


def _gaffer_errors(command: F) -> F:
    """Print any failure as one line on stderr and exit 2 (no traceback): exit 1 is
    reserved for ``status`` finding an alert."""

    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return command(*args, **kwargs)
        except (click.exceptions.Exit, click.ClickException, click.Abort):
            raise
        except GafferError as exc:
            _fail(str(exc))
        except SQLAlchemyError as exc:
            _fail(f"the Gaffer database refused: {driver_reason(exc)}")
        except Exception as exc:  # noqa: BLE001 - one line, as every CLI failure
            _fail(f"unexpected {type(exc).__name__}: {exc}")

    return wrapper  # type: ignore[return-value]


def _fail(message: str) -> None:
    first = " ".join(message.split())  # one line, whatever the message held
    click.echo(f"error: {first}", err=True)
    sys.exit(2)


def _store(ctx: click.Context, *, check_tasks: bool = True) -> ScheduleStore:
    """A ScheduleStore of the app, once its database is checked (see :func:`_ready`)."""
    _ready(ctx)
    return ScheduleStore(_app(ctx), check_tasks=check_tasks)


def _ready(ctx: click.Context) -> Database:
    """The app's Gaffer database, checked: it exists and is migrated (never created)."""
    database = database_for(_app(ctx))
    database.check_ready()
    return database


def _json_option(value: str | None, name: str) -> Any:
    if value is None:
        return None
    try:
        return json.loads(value)
    except ValueError as exc:
        raise click.BadParameter(f"not valid JSON ({exc})", param_hint=name) from exc


def _when(value: datetime | None) -> str:
    return "-" if value is None else value.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M:%SZ")


def _describe(schedule: Cron | Every | None) -> str:
    if schedule is None:
        return "?"
    if isinstance(schedule, Cron):
        return f"cron {schedule.expr!r} {schedule.tz}"
    return f"every {schedule.interval:g}s"


def _state(stored: StoredSchedule) -> str:
    if stored.error:
        return "error"
    return "enabled" if stored.enabled else "paused"


def _schedule_json(stored: StoredSchedule) -> dict[str, Any]:
    return {
        "name": stored.name,
        "task": stored.task,
        "schedule": None if stored.schedule is None else stored.schedule.to_dict(),
        "args": stored.args,
        "kwargs": stored.kwargs,
        "options": stored.options,
        "catchup": stored.policy.catchup,
        "overlap": stored.policy.overlap,
        "state": _state(stored),
        "source": stored.source,
        "next_fire_at": None if stored.next_fire_at is None else stored.next_fire_at.isoformat(),
        "error": stored.error,
    }


@click.group(name="gaffer")
def gaffer() -> None:
    """celery-gaffer: schedules, runs and the Gaffer database."""


@gaffer.command()
@click.option(
    "--to",
    "target",
    default="head",
    show_default=True,
    help="Revision to upgrade or downgrade to; 'base' drops every Gaffer table.",
)
@click.pass_context
@_gaffer_errors
def migrate(ctx: click.Context, target: str) -> None:
    """Create or upgrade the Gaffer tables (running it twice changes nothing)."""
    database = database_for(_app(ctx))
    before, after = database.migrate(target)
    where = database.settings.masked_url
    if before == after:
        click.echo(f"{where}: already at revision {after or 'base'}, nothing to do")
    else:
        click.echo(f"{where}: migrated from {before or 'empty'} to revision {after or 'base'}")


@gaffer.command()
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line.")
@click.option("--limit", type=click.IntRange(min=1), default=None, help="At most this many.")
@click.pass_context
@_gaffer_errors
def schedules(ctx: click.Context, as_json: bool, limit: int | None) -> None:
    """List schedules: name, task, when, next fire, state and source."""
    rows = _store(ctx, check_tasks=False).list(limit=limit)
    if as_json:
        for stored in rows:
            click.echo(json.dumps(_schedule_json(stored)))
        return
    _table(
        ("NAME", "TASK", "SCHEDULE", "NEXT FIRE", "STATE", "SOURCE"),
        [
            (s.name, s.task, _describe(s.schedule), _when(s.next_fire_at), _state(s), s.source)
            for s in rows
        ],
    )
    for s in rows:
        if s.error:
            click.echo(f"error in {s.name}: {s.error}", err=True)


@gaffer.command()
@click.argument("name")
@click.argument("task")
@click.option("--cron", "cron_expr", help="Five-field cron expression, e.g. '30 2 * * *'.")
@click.option("--tz", default="UTC", show_default=True, help="IANA zone of the cron expression.")
@click.option("--every", "every_seconds", type=float, help="Interval in whole seconds.")
@click.option("--jitter", type=float, default=0.0, help="Delay each fire by up to this many s.")
@click.option("--args", "args_json", help="Positional arguments as a JSON list.")
@click.option("--kwargs", "kwargs_json", help="Keyword arguments as a JSON object.")
@click.option("--options", "options_json", help="Celery send options as a JSON object.")
@click.option("--catchup", type=click.Choice(CATCHUP_POLICIES), default=None)
@click.option("--overlap", type=click.Choice(OVERLAP_POLICIES), default=None)
@click.option(
    "--starting-deadline", type=float, default=None, help="Seconds; older fires are missed."
)
@click.option("--grace", type=float, default=None, help="Seconds before a fire counts as late.")
@click.option("--paused", is_flag=True, help="Add it paused.")
@click.option("--replace", is_flag=True, help="Overwrite a schedule of the same name.")
@click.pass_context
@_gaffer_errors
def add(
    ctx: click.Context,
    name: str,
    task: str,
    cron_expr: str | None,
    tz: str,
    every_seconds: float | None,
    jitter: float,
    args_json: str | None,
    kwargs_json: str | None,
    options_json: str | None,
    catchup: str | None,
    overlap: str | None,
    starting_deadline: float | None,
    grace: float | None,
    paused: bool,
    replace: bool,
) -> None:
    """Add schedule NAME sending TASK (source db; Beat picks it up on its next tick)."""
    if (cron_expr is None) == (every_seconds is None):
        raise click.UsageError("give exactly one of --cron EXPR or --every SECONDS")
    schedule = (
        cron(cron_expr, tz, jitter=jitter)
        if cron_expr is not None
        else every(every_seconds if every_seconds is not None else 0, jitter=jitter)
    )
    policy: dict[str, Any] = {"enabled": not paused}
    for key, value in (
        ("catchup", catchup),
        ("overlap", overlap),
        ("starting_deadline", starting_deadline),
        ("grace", grace),
    ):
        if value is not None:
            policy[key] = value
    stored = _store(ctx).add(
        name,
        task,
        schedule,
        args=_json_option(args_json, "--args") or (),
        kwargs=_json_option(kwargs_json, "--kwargs"),
        options=_json_option(options_json, "--options"),
        gaffer=policy,
        replace=replace,
    )
    click.echo(
        f"added {stored.name}: {_describe(stored.schedule)}, next fire {_when(stored.next_fire_at)}"
    )


@gaffer.command()
@click.argument("name")
@click.pass_context
@_gaffer_errors
def pause(ctx: click.Context, name: str) -> None:
    """Pause schedule NAME (its fires while paused are never sent)."""
    _store(ctx, check_tasks=False).pause(name)
    click.echo(f"paused {name}")


@gaffer.command()
@click.argument("name")
@click.pass_context
@_gaffer_errors
def resume(ctx: click.Context, name: str) -> None:
    """Resume schedule NAME from its next nominal time."""
    stored = _store(ctx).resume(name)
    click.echo(f"resumed {name}, next fire {_when(stored.next_fire_at)}")


@gaffer.command()
@click.argument("name")
@click.pass_context
@_gaffer_errors
def remove(ctx: click.Context, name: str) -> None:
    """Remove schedule NAME (its history stays until cleanup)."""
    _store(ctx, check_tasks=False).remove(name)
    click.echo(f"removed {name}")


@gaffer.command()
@click.argument("name")
@click.pass_context
@_gaffer_errors
def trigger(ctx: click.Context, name: str) -> None:
    """Send one fire of NAME now, with its own key."""
    key = _store(ctx, check_tasks=False).trigger(name)
    click.echo(f"sent {key}")


@gaffer.command()
@click.argument("name")
@click.option("--from", "start", required=True, type=click.DateTime(), help="UTC, exclusive.")
@click.option("--to", "end", required=True, type=click.DateTime(), help="UTC, inclusive.")
@click.option("--limit", type=click.IntRange(min=1), default=10_000, show_default=True)
@click.pass_context
@_gaffer_errors
def backfill(ctx: click.Context, name: str, start: datetime, end: datetime, limit: int) -> None:
    """Send the fires of NAME between --from and --to (UTC) that were never sent."""
    report = _store(ctx, check_tasks=False).backfill(
        name, start.replace(tzinfo=timezone.utc), end.replace(tzinfo=timezone.utc), limit=limit
    )
    click.echo(f"sent {report.sent} fires of {name}; {report.already} were already in the ledger")


def _table(
    header: tuple[str, ...], rows: list[tuple[Any, ...]], *, last_wide: bool = False
) -> None:
    """Columns of at most 40 characters (the last one whole when ``last_wide``)."""
    table = [header, *rows]
    widths = [min(40, max(len(str(row[i])) for row in table)) for i in range(len(header))]
    for row in table:
        cells = [str(cell)[:40].ljust(width) for cell, width in zip(row, widths, strict=True)]
        if last_wide:
            cells[-1] = str(row[-1])
        click.echo("  ".join(cells).rstrip())


@gaffer.command()
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line.")
@click.pass_context
@_gaffer_errors
def status(ctx: click.Context, as_json: bool) -> None:
    """One line per schedule with its state: ok, late, failing, paused or error.

    Exits 1 when any schedule is late, failing or in error (use it as a probe or a cron
    check); the last column says why.
    """
    database = _ready(ctx)
    with database.read() as conn:
        healths = all_health(conn, database.models, utcnow(), database.settings)
    if as_json:
        for h in healths:
            click.echo(
                json.dumps(
                    {
                        "schedule": h.schedule,
                        "state": h.state,
                        "last_success_at": _iso(h.last_success_at),
                        "next_fire_at": _iso(h.next_fire_at),
                        "consecutive_failures": h.consecutive_failures,
                        "late_since": _iso(h.due_nominal_at) if h.state == Health.LATE else None,
                        "error": h.error,
                        "reason": h.reason,
                    }
                )
            )
    else:
        _table(
            ("SCHEDULE", "STATE", "LAST SUCCESS", "NEXT RUN", "FAILURES", "REASON"),
            [
                (
                    h.schedule,
                    h.state,
                    _when(h.last_success_at),
                    _when(h.next_fire_at),
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
@_gaffer_errors
def runs(
    ctx: click.Context, schedule_name: str | None, scheduled: bool, limit: int, as_json: bool
) -> None:
    """The latest runs, newest first: schedule, nominal time, state, items, duration."""
    database = _ready(ctx)
    with database.read() as conn:
        rows = run_rows.latest_runs(
            conn, database.models, limit=limit, schedule=schedule_name, scheduled_only=scheduled
        )
    if as_json:
        for row in rows:
            click.echo(
                json.dumps({k: _iso(v) if isinstance(v, datetime) else v for k, v in row.items()})
            )
        return
    _table(
        ("SCHEDULE", "NOMINAL", "TASK", "STATE", "ITEMS", "DURATION", "ERROR"),
        [
            (
                row["schedule"] or "-",
                _when(row["nominal_at"]),
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
@_gaffer_errors
def cleanup_command(ctx: click.Context) -> None:
    """Delete run records, ledger rows and completed keys past their retention."""
    database = _ready(ctx)
    report = cleanup(database, utcnow())
    click.echo(f"deleted {report.runs} runs, {report.fires} ledger rows, {report.keys} keys")


def _iso(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()
