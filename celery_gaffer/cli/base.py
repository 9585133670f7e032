"""What every ``celery gaffer`` command shares: the group, the app, one-line errors, tables."""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any, TypeVar

import click
from sqlalchemy.exc import SQLAlchemyError

from ..exceptions import GafferError
from ..schedule_store import ScheduleStore
from ..schedules.kinds import Cron, Every
from ..store import Database, database_for
from ..store.database import driver_reason
from ..store.schedule_rows import StoredSchedule

F = TypeVar("F", bound=Callable[..., Any])


def app_of(ctx: click.Context) -> Any:
    obj = ctx.find_root().obj
    app = getattr(obj, "app", None)
    if app is None:
        raise click.UsageError("run this as `celery -A proj gaffer ...`")
    return app


def gaffer_errors(command: F) -> F:
    """Print any failure as one line on stderr and exit 2 (no traceback): exit 1 is
    reserved for ``status`` finding an alert."""

    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return command(*args, **kwargs)
        except (click.exceptions.Exit, click.ClickException, click.Abort):
            raise
        except GafferError as exc:
            fail(str(exc))
        except SQLAlchemyError as exc:
            fail(f"the Gaffer database refused: {driver_reason(exc)}")
        except Exception as exc:  # noqa: BLE001 - one line, as every CLI failure
            fail(f"unexpected {type(exc).__name__}: {exc}")

    return wrapper  # type: ignore[return-value]


def fail(message: str) -> None:
    first = " ".join(message.split())  # one line, whatever the message held
    click.echo(f"error: {first}", err=True)
    sys.exit(2)


def store_of(ctx: click.Context, *, check_tasks: bool = True) -> ScheduleStore:
    """A ScheduleStore of the app, once its database is checked (see :func:`ready`)."""
    ready(ctx)
    return ScheduleStore(app_of(ctx), check_tasks=check_tasks)


def ready(ctx: click.Context) -> Database:
    """The app's Gaffer database, checked: it exists and is migrated (never created)."""
    database = database_for(app_of(ctx))
    database.check_ready()
    return database


def json_option(value: str | None, name: str) -> Any:
    if value is None:
        return None
    try:
        return json.loads(value)
    except ValueError as exc:
        raise click.BadParameter(f"not valid JSON ({exc})", param_hint=name) from exc


def when(value: datetime | None) -> str:
    return "-" if value is None else value.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M:%SZ")


def describe(schedule: Cron | Every | None) -> str:
    if schedule is None:
        return "?"
    if isinstance(schedule, Cron):
        return f"cron {schedule.expr!r} {schedule.tz}"
    return f"every {schedule.interval:g}s"


def state_of(stored: StoredSchedule) -> str:
    if stored.error:
        return "error"
    return "enabled" if stored.enabled else "paused"


def schedule_json(stored: StoredSchedule) -> dict[str, Any]:
    return {
        "name": stored.name,
        "task": stored.task,
        "schedule": None if stored.schedule is None else stored.schedule.to_dict(),
        "args": stored.args,
        "kwargs": stored.kwargs,
        "options": stored.options,
        "catchup": stored.policy.catchup,
        "overlap": stored.policy.overlap,
        "state": state_of(stored),
        "source": stored.source,
        "next_fire_at": None if stored.next_fire_at is None else stored.next_fire_at.isoformat(),
        "error": stored.error,
    }


@click.group(name="gaffer")
def gaffer() -> None:
    """celery-gaffer: schedules, runs and the Gaffer database."""


def table(header: tuple[str, ...], rows: list[tuple[Any, ...]], *, last_wide: bool = False) -> None:
    """Columns of at most 40 characters (the last one whole when ``last_wide``)."""
    table = [header, *rows]
    widths = [min(40, max(len(str(row[i])) for row in table)) for i in range(len(header))]
    for row in table:
        cells = [str(cell)[:40].ljust(width) for cell, width in zip(row, widths, strict=True)]
        if last_wide:
            cells[-1] = str(row[-1])
        click.echo("  ".join(cells).rstrip())


def iso(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()
