"""``gaffer calendars add|list|remove``: the calendars stored in the database."""

from __future__ import annotations

import json

import click

from .base import OneLineGroup, actor_option, echo, gaffer, gaffer_errors, store_of, table


@gaffer.group(name="calendars", cls=OneLineGroup)
def calendars() -> None:
    """Calendars of dates stored in the database, for schedules' skip_on."""


@calendars.command(name="add")
@click.argument("name")
@click.argument("days", nargs=-1, required=True)
@click.option("--note", help="Why: kept in the audit log.")
@actor_option
@click.pass_context
@gaffer_errors
def add(
    ctx: click.Context, name: str, days: tuple[str, ...], note: str | None, actor: str | None
) -> None:
    """Add DAYS (YYYY-MM-DD) to the stored calendar NAME (made if new)."""
    added = store_of(ctx, check_tasks=False, actor=actor).add_calendar(name, days, note=note)
    echo(f"calendar {name}: {len(added)} dates added")


@calendars.command(name="list")
@click.option("--json", "as_json", is_flag=True, help="One JSON object: name -> dates.")
@click.pass_context
@gaffer_errors
def list_calendars(ctx: click.Context, as_json: bool) -> None:
    """The stored calendars: name, how many dates, the first and last."""
    found = store_of(ctx, check_tasks=False).calendars()
    if as_json:
        click.echo(json.dumps({n: [d.isoformat() for d in days] for n, days in found.items()}))
        return
    rows = [
        (name, len(days), days[0].isoformat(), days[-1].isoformat()) for name, days in found.items()
    ]
    table(("NAME", "DATES", "FIRST", "LAST"), rows)


@calendars.command(name="remove")
@click.argument("name")
@click.argument("days", nargs=-1)
@click.option("--note", help="Why: kept in the audit log.")
@actor_option
@click.pass_context
@gaffer_errors
def remove(
    ctx: click.Context, name: str, days: tuple[str, ...], note: str | None, actor: str | None
) -> None:
    """Remove DAYS from the stored calendar NAME, or (no DAYS) the whole calendar, which
    no schedule may name in skip_on then."""
    store = store_of(ctx, check_tasks=False, actor=actor)
    gone = store.remove_calendar(name, days or None, note=note)
    echo(f"calendar {name}: {len(gone)} dates removed")
