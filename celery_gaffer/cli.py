"""``celery -A proj gaffer <command>``: the command line, a thin layer over the API."""

from __future__ import annotations

import sys
from typing import Any

import click

from .exceptions import GafferError
from .store import database_for


def _app(ctx: click.Context) -> Any:
    obj = ctx.find_root().obj
    app = getattr(obj, "app", None)
    if app is None:
        raise click.UsageError("run this as `celery -A proj gaffer ...`")
    return app


@click.group(name="gaffer")
def gaffer() -> None:
    """celery-gaffer: schedules, runs and the Gaffer database."""


@gaffer.command()
@click.pass_context
def migrate(ctx: click.Context) -> None:
    """Create or upgrade the Gaffer tables (running it twice changes nothing)."""
    try:
        database = database_for(_app(ctx))
        before, after = database.migrate()
    except GafferError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(2)
    where = database.settings.masked_url
    if before == after:
        click.echo(f"{where}: already at revision {after}, nothing to do")
    else:
        click.echo(f"{where}: migrated from {before or 'empty'} to revision {after}")
