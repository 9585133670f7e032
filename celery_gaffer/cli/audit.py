"""``gaffer audit [NAME]``: the audit log, newest first."""

from __future__ import annotations

import json
from typing import Any

import click

from ..clock import utcnow
from ..store.audit import AuditEntry
from .base import echo, gaffer, gaffer_errors, store_of, table
from .times import earlier_option, when


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
