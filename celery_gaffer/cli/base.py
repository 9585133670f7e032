"""What every ``celery gaffer`` command shares: the group, the app, one-line errors, tables.

Text that came from users or the database (names, arguments, run errors) reaches the
terminal only through :func:`printable`, :func:`echo`, :func:`table` and :func:`fail`:
control characters are shown escaped, never interpreted, and a long value is cut, saying
how much was left out.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from datetime import datetime
from typing import Any, NoReturn, TypeVar

import click
from sqlalchemy.exc import SQLAlchemyError

from ..exceptions import GafferError, InvalidInput
from ..protocol import loads_json
from ..schedule_store import ScheduleStore
from ..schedules.calendars import ON_SKIP
from ..schedules.display import describe as describe
from ..schedules.spec import CATCHUP_POLICIES, OVERLAP_POLICIES
from ..store import Database, database_for
from ..store.database import driver_reason
from ..store.schedule_rows import StoredSchedule
from ..text import LINE_LIMIT as LINE_LIMIT
from ..text import VALUE_LIMIT as VALUE_LIMIT
from ..text import cut_marked, escape_but_layout
from ..text import printable as printable
from .times import aware_option
from .times import when as when  # re-exported: the commands' one way to show an instant

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
        except (click.exceptions.Exit, click.Abort):
            raise
        except click.ClickException as exc:
            fail(_click_message(exc))
        except GafferError as exc:
            fail(str(exc))
        except SQLAlchemyError as exc:
            fail(f"the Gaffer database refused: {driver_reason(exc)}")
        except Exception as exc:  # noqa: BLE001 - one line, as every CLI failure
            fail(f"unexpected {type(exc).__name__}: {exc}")

    return wrapper  # type: ignore[return-value]


def fail(message: str) -> NoReturn:
    """Print ``message`` as one line on stderr (``error: ...``) and exit 2."""
    click.echo(f"error: {one_line(message)}", err=True)
    sys.exit(2)


def one_line(message: str) -> str:
    """``message`` on one printable line: whitespace runs become one space, each word is
    cut at :data:`VALUE_LIMIT` characters and the whole at :data:`LINE_LIMIT`."""
    words = " ".join(cut_marked(word, VALUE_LIMIT) for word in message.split())
    return printable(words, LINE_LIMIT)


def echo(text: str, *, err: bool = False, limit: int | None = None) -> None:
    """``click.echo`` for text that holds values from users or the database: control
    characters escaped but for the newlines and tabs the text is laid out with, and the
    text cut past ``limit`` characters (cut long values with :func:`printable` instead
    where the text goes on after them)."""
    click.echo(escape_but_layout(text, limit), err=err)


def store_of(
    ctx: click.Context, *, check_tasks: bool = True, actor: str | None = None
) -> ScheduleStore:
    """A ScheduleStore of the app, once its database is checked (see :func:`ready`); its
    writes are recorded in the audit log as made by ``actor`` (None: the OS user) through
    the command line (source ``cli``)."""
    ready(ctx)
    return ScheduleStore(app_of(ctx), check_tasks=check_tasks, actor=actor, audit_source="cli")


#: ``--actor NAME``, on every command that changes schedules.
actor_option = click.option(
    "--actor",
    metavar="NAME",
    default=None,
    help="Who makes the change, as the audit log records it (default: the OS user).",
)


def ready(ctx: click.Context) -> Database:
    """The app's Gaffer database, checked: it exists and is migrated (never created)."""
    database = database_for(app_of(ctx))
    database.check_ready()
    return database


def json_option(value: str | None, name: str) -> Any:
    if value is None:
        return None
    try:
        return loads_json(value, name)
    except InvalidInput as exc:
        # The field is already named by click's hint: the reason alone.
        raise click.BadParameter(str(exc).partition(": ")[2], param_hint=name) from None


def state_of(stored: StoredSchedule) -> str:
    if stored.error:
        return "error"
    if not stored.enabled:
        return "paused"
    return "done" if stored.finished else "enabled"


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
        **stored.bounds_json(),
        "error": stored.error,
        "paused_note": stored.paused_note,
        "paused_until": iso(stored.paused_until),
    }


def _click_message(exc: click.ClickException) -> str:
    if isinstance(exc, click.UsageError) and exc.ctx is not None:
        return f"{exc.format_message()} (see `{exc.ctx.command_path} --help`)"
    return exc.format_message()


class OneLineCommand(click.Command):
    """A command whose usage errors (a missing argument, a value of the wrong type) are
    one line on stderr and exit 2, like every other failure."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        try:
            return super().parse_args(ctx, args)
        except click.UsageError as exc:
            fail(_click_message(exc))


class OneLineGroup(click.Group):
    """The ``gaffer`` group: its commands are :class:`OneLineCommand` and an unknown
    command name is one line too."""

    command_class = OneLineCommand

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        try:
            return super().resolve_command(ctx, args)
        except click.UsageError as exc:
            fail(_click_message(exc))


@click.group(name="gaffer", cls=OneLineGroup)
def gaffer() -> None:
    """celery-gaffer: schedules, runs and the Gaffer database."""


def table(
    header: tuple[str, ...],
    rows: list[tuple[Any, ...]],
    *,
    last_wide: bool = False,
    whole: tuple[str, ...] = ("KEY", "TASK ID"),
) -> None:
    """Columns of at most 50 characters, a longer cell cut with ``…``; the columns named
    in ``whole`` (identifiers, to copy) and the last one when ``last_wide`` are cut only
    past :data:`LINE_LIMIT` characters. Every cell is :func:`printable`."""
    table = [header, *rows]
    limits = [None if name in whole else COLUMN_WIDTH for name in header]
    if last_wide:
        limits[-1] = None
    texts = [
        [cell_text(cell, limit) for cell, limit in zip(row, limits, strict=True)] for row in table
    ]
    widths = [max(len(row[i]) for row in texts) for i in range(len(header))]
    for row in texts:
        cells = [cell.ljust(width) for cell, width in zip(row, widths, strict=True)]
        if last_wide:
            cells[-1] = row[-1]
        click.echo("  ".join(cells).rstrip())


#: The widest a column gets (but those :func:`table` keeps whole).
COLUMN_WIDTH = 50


def cell_text(cell: object, limit: int | None = COLUMN_WIDTH) -> str:
    """A table cell as printed: :func:`printable`, then cut to ``limit`` characters with
    ``…`` (``None``: a whole cell, cut only past :data:`LINE_LIMIT`)."""
    if limit is None:
        return printable(cell, LINE_LIMIT)
    text = printable(cell, limit)  # escaping first: the width is what the terminal shows
    return text if len(text) <= limit else text[: limit - 1] + "…"


def iso(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()


def policy_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """The ``gaffer`` options of ``add`` and ``update``, passed to the command as keyword
    arguments that :func:`policy_of` turns into the ``gaffer`` dict."""
    options = [
        click.option(
            "--catchup",
            type=click.Choice(CATCHUP_POLICIES),
            default=None,
            help="Which fires missed while no Beat ran are sent (a new schedule: latest).",
        ),
        click.option(
            "--overlap",
            type=click.Choice(OVERLAP_POLICIES),
            default=None,
            help="Whether the schedule's runs may overlap (a new schedule: allow).",
        ),
        click.option(
            "--starting-deadline", type=float, default=None, help="Seconds; older fires are missed."
        ),
        click.option(
            "--grace", type=float, default=None, help="Seconds before a fire counts as late."
        ),
        click.option("--start-at", help="No fire before this ISO 8601 time (with an offset)."),
        click.option("--end-at", help="No fire after this ISO 8601 time (with an offset)."),
        click.option(
            "--max-runs",
            type=click.IntRange(min=1),
            default=None,
            help="Done after this many fires.",
        ),
        click.option(
            "--ping-url",
            help="Pinged when a run starts (/start), succeeds and fails (/fail), "
            "healthchecks.io style.",
        ),
        click.option(
            "--skip-on",
            multiple=True,
            help="A calendar whose dates get no fire: weekends, holidays:GB, holidays:US-CA "
            "or a stored calendar (repeat for several).",
        ),
        click.option(
            "--on-skip",
            type=click.Choice(ON_SKIP),
            default=None,
            help="A fire on a --skip-on date: skip it, or move it to the next_day or "
            "previous_day not in them, at the same local time (default: skip).",
        ),
    ]
    for option in reversed(options):
        command = option(command)
    return command


#: The keyword arguments :func:`policy_options` adds.
POLICY_PARAMETERS = (
    "catchup", "overlap", "starting_deadline", "grace", "start_at", "end_at", "max_runs",
    "ping_url", "skip_on", "on_skip",
)  # fmt: skip


def policy_of(values: dict[str, Any]) -> dict[str, Any]:
    """The ``gaffer`` options given on the command line (those not given are left out)."""
    policy = {key: values[key] for key in POLICY_PARAMETERS if values.get(key) is not None}
    if "skip_on" in policy:  # a repeatable option: () when not given
        policy["skip_on"] = list(policy["skip_on"])
        if not policy["skip_on"]:
            del policy["skip_on"]
    for key in ("start_at", "end_at"):
        if key in policy:
            policy[key] = aware_option(policy[key], "--" + key.replace("_", "-"))
    return policy
