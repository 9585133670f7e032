"""``celery -A proj gaffer <command>``: the command line, a thin layer over the API.

Celery loads this group for every ``celery`` command (``celery worker`` and ``celery
--help`` included), so it imports only click: each command's module, with the store,
Celery's parts or an importer's client behind it, is imported when that command runs or
its own help is shown. ``gaffer --help`` lists the commands from :data:`COMMANDS`
without importing them.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

import click

#: name -> ("module:attribute" under ``celery_gaffer.cli``, the first paragraph of the
#: command's help: what ``--help`` shortens into the command list).
COMMANDS: dict[str, tuple[str, str]] = {
    "add": (
        "schedules:add",
        "Add schedule NAME sending TASK (source db; Beat picks it up on its next tick).",
    ),
    "audit": (
        "observe:audit",
        "The audit log, newest first: every change to schedule NAME (or to all).",
    ),
    "backfill": (
        "schedules:backfill",
        "Send the fires F of NAME with FROM < F <= TO that were never sent.",
    ),
    "calendars": (
        "calendars:calendars",
        "Calendars of dates stored in the database, for schedules' skip_on.",
    ),
    "cleanup": (
        "observe:cleanup_command",
        "Delete run records, ledger rows and completed keys past their retention.",
    ),
    "explain": (
        "explain:explain",
        "The next fires of schedule NAME (or of --cron EXPR --tz ZONE, or --every SECONDS),"
        " in its zone and in UTC, and what every DST change among them does to it.",
    ),
    "migrate": (
        "observe:migrate",
        "Create or upgrade the Gaffer tables (running it twice changes nothing).",
    ),
    "pause": (
        "schedules:pause",
        "Pause schedule NAME (its fires while paused are never sent).",
    ),
    "remove": ("schedules:remove", "Remove schedule NAME (its history stays until cleanup)."),
    "resume": (
        "schedules:resume",
        "Resume schedule NAME from its next nominal time (fires while paused are not sent).",
    ),
    "runs": (
        "observe:runs",
        "The latest runs, newest first: schedule, nominal time, task, state, items, duration,"
        " idempotency key and reason (the error, or why the run was skipped, duplicate,"
        " fence_lost, missed or lost).",
    ),
    "schedules": (
        "schedules:schedules",
        "List schedules: name, task, when, next fire, state, source and send options.",
    ),
    "simulate": (
        "simulate:simulate_command",
        "Rehearse Beat from --from to --to, down over each --down window: the fate of each"
        " fire (on_time, late, skipped, missed, calendar_skipped, moved), decided by Beat's"
        " own code on a virtual clock. Reads the stored schedules; never writes, never"
        " publishes.",
    ),
    "status": (
        "observe:status",
        "One line per schedule with its state: ok, late, failing, paused or error.",
    ),
    "trigger": ("schedules:trigger", "Send one fire of NAME now, with its own key."),
    "update": (
        "update:update",
        "Change only the given fields of schedule NAME and show its next fires.",
    ),
    "web": (
        "web:web",
        "Serve the web console: schedules, runs, alerts and their actions (needs the web"
        " extra: pip install 'celery-gaffer[web]').",
    ),
}

#: The ``import`` group's commands, the same way.
IMPORT_COMMANDS: dict[str, tuple[str, str]] = {
    "beat-schedule": (
        "imports:beat_schedule",
        "Import app.conf.beat_schedule: crontab, schedule and numbers translated exactly.",
    ),
    "django-celery-beat": (
        "import_django:django_celery_beat",
        "Import django-celery-beat's periodic tasks as its Beat runs them.",
    ),
    "redbeat": (
        "import_redbeat:redbeat",
        "Import redbeat's entries: crontab, interval and simple rrule mapped exactly.",
    ),
}


class LazyGroup(click.Group):
    """A group whose commands are imported by name when used (click's lazy loading of
    subcommands); a usage error (an unknown command) is one line on stderr, exit 2."""

    def __init__(self, name: str, lazy: dict[str, tuple[str, str]], **kwargs: Any) -> None:
        super().__init__(name, **kwargs)
        self.lazy = lazy

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self.lazy})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        command = super().get_command(ctx, cmd_name)
        if command is not None or cmd_name not in self.lazy:
            return command
        module, attribute = self.lazy[cmd_name][0].split(":")
        loaded = getattr(import_module(f"{__name__}.{module}"), attribute)
        if not isinstance(loaded, click.Command):  # pragma: no cover - a wrong map entry
            raise TypeError(f"{module}:{attribute} is not a click command")
        return loaded

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        # The list from the map's help, as click shortens it: no command module imported.
        names = self.list_commands(ctx)
        if not names:
            return
        limit = formatter.width - 6 - max(len(name) for name in names)
        rows = []
        for name in names:
            loaded = self.commands.get(name)
            command = loaded or click.Command(name, help=self.lazy[name][1])
            rows.append((name, command.get_short_help_str(limit)))
        with formatter.section("Commands"):
            formatter.write_dl(rows)

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        try:
            return super().resolve_command(ctx, args)
        except click.UsageError as exc:
            from .base import _click_message, fail

            fail(_click_message(exc))


gaffer = LazyGroup(
    "gaffer", COMMANDS, help="celery-gaffer: schedules, runs and the Gaffer database."
)
gaffer.add_command(
    LazyGroup(
        "import",
        IMPORT_COMMANDS,
        help="Import schedules from another scheduler as schedules of source db.",
    )
)

__all__ = ["COMMANDS", "IMPORT_COMMANDS", "LazyGroup", "gaffer"]
