"""Commands that change schedules: add, pause, resume, remove, trigger, backfill."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from datetime import date
from typing import Any

import click

from ..clock import utcnow
from ..exceptions import ScheduleExists
from ..schedules.kinds import At, Schedule, cron, every
from ..schedules.preview import LISTED_FIRES
from ..schedules.upcoming import calendar_view, first_listed, upcoming, with_known_dates
from ..store.schedule_rows import StoredSchedule
from .base import (
    LINE_LIMIT,
    actor_option,
    describe,
    echo,
    fail,
    gaffer,
    gaffer_errors,
    json_option,
    policy_of,
    policy_options,
    printable,
    schedule_json,
    state_of,
    store_of,
    table,
)
from .times import aware_option, instant_option, later_option, utc_option, when, zone_of
from .update import dry_run_option, show_preview

#: Next fires whose calendar reasons ``schedules --json`` gives (``explain``'s default).
EXPLAINED = 10


@gaffer.command()
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line.")
@click.option("--limit", type=click.IntRange(min=1), default=None, help="At most this many.")
@utc_option
@click.pass_context
@gaffer_errors
def schedules(ctx: click.Context, as_json: bool, limit: int | None, in_utc: bool) -> None:
    """List schedules: name, task, when, next fire, state, source and send options.

    NEXT FIRE is shown in the schedule's zone next to UTC for a cron schedule in a zone
    other than UTC (--utc: in UTC only). --json adds "calendar": why its skip_on calendars
    skip or move its next fires, as explain NAME --json says.
    """
    store = store_of(ctx, check_tasks=False)
    rows = store.list(limit=limit)
    if as_json:
        # Stored calendars are read once for all rows, and only when one names them.
        named = any(
            s.policy.bounds.calendar and s.policy.bounds.calendar.stored_names for s in rows
        )
        calendars = store.calendars() if named else {}
        for stored in rows:
            echo(
                json.dumps(
                    {**schedule_json(stored), "calendar": calendar_reasons(stored, calendars)}
                )
            )
        return
    table(
        ("NAME", "TASK", "SCHEDULE", "NEXT FIRE", "STATE", "SOURCE", "OPTIONS"),
        [
            (
                s.name,
                s.task,
                describe(s.schedule),
                when(s.next_fire_at, None if in_utc else zone_of(s.schedule)),
                state_of(s),
                s.source,
                options_text(s.options),
            )
            for s in rows
        ],
        last_wide=True,
    )
    for s in rows:
        if s.error:
            echo(f"error in {printable(s.name)}: {printable(s.error, LINE_LIMIT)}", err=True)


def calendar_reasons(stored: StoredSchedule, calendars: Mapping[str, Iterable[date]]) -> list[str]:
    """Why its calendar skips or moves each of its next fires (the ones ``explain`` lists
    from the next fire, or from the fire before it the calendar skipped or moved), as
    ``explain --json``'s ``calendar`` says; [] without a calendar or a next fire."""
    rule = with_known_dates(stored.policy.bounds.calendar, calendars)
    view = calendar_view(stored.schedule, rule)
    if view is None or stored.next_fire_at is None:
        return []
    bounds = stored.policy.bounds
    start = first_listed(view, stored.watermark_at, stored.next_fire_at, bounds.start_at)
    return [fire.reason for fire in upcoming(view, view.schedule, start, EXPLAINED) if fire.reason]


def options_text(options: dict[str, Any] | None) -> str:
    """Send options as ``queue=reports priority=5`` (``-`` for none), JSON values compact."""
    if not options:
        return "-"
    return " ".join(
        f"{key}={value if isinstance(value, str) else json.dumps(value, separators=(',', ':'))}"
        for key, value in sorted(options.items())
    )


@gaffer.command()
@click.argument("name")
@click.argument("task")
@click.option("--cron", "cron_expr", help="Five-field cron expression, e.g. '30 2 * * *'.")
@click.option("--tz", default="UTC", show_default=True, help="IANA zone of the cron expression.")
@click.option("--every", "every_seconds", type=float, help="Interval in whole seconds.")
@click.option(
    "--at",
    "at_text",
    help="Fire once, at this ISO 8601 time with an offset, e.g. 2026-12-24T09:00+01:00.",
)
@click.option("--jitter", type=float, default=0.0, help="Delay each fire by up to this many s.")
@click.option("--args", "args_json", help="Positional arguments as a JSON list.")
@click.option("--kwargs", "kwargs_json", help="Keyword arguments as a JSON object.")
@click.option("--options", "options_json", help="Celery send options as a JSON object.")
@policy_options
@click.option("--paused", is_flag=True, help="Add it paused.")
@click.option("--replace", is_flag=True, help="Overwrite a schedule of the same name.")
@actor_option
@click.pass_context
@gaffer_errors
def add(
    ctx: click.Context,
    /,
    name: str,
    task: str,
    cron_expr: str | None,
    tz: str,
    every_seconds: float | None,
    at_text: str | None,
    jitter: float,
    args_json: str | None,
    kwargs_json: str | None,
    options_json: str | None,
    paused: bool,
    replace: bool,
    actor: str | None,
    **policy_values: Any,
) -> None:
    """Add schedule NAME sending TASK (source db; Beat picks it up on its next tick)."""
    if [cron_expr, every_seconds, at_text].count(None) != 2:
        raise click.UsageError("give exactly one of --cron EXPR, --every SECONDS or --at TIME")
    schedule: Schedule
    if cron_expr is not None:
        schedule = cron(cron_expr, tz, jitter=jitter)
    elif at_text is not None:
        schedule = At(aware_option(at_text, "--at"), tz=tz)
    else:
        schedule = every(every_seconds if every_seconds is not None else 0, jitter=jitter)
    policy = {"enabled": not paused, **policy_of(policy_values)}
    try:
        stored = store_of(ctx, actor=actor).add(
            name,
            task,
            schedule,
            args=json_option(args_json, "--args") or (),
            kwargs=json_option(kwargs_json, "--kwargs"),
            options=json_option(options_json, "--options"),
            gaffer=policy,
            replace=replace,
        )
    except ScheduleExists:
        fail(
            f"schedule {name!r} already exists: pass --replace to overwrite it, "
            f"or change some of its fields with `gaffer update {name} ...`"
        )
    next_fire = when(stored.next_fire_at, zone_of(stored.schedule))
    echo(f"added {stored.name}: {describe(stored.schedule)}, next fire {next_fire}")


note_option = click.option(
    "--note", help="Why: kept in the audit log (and, for a pause, with the schedule)."
)


@gaffer.command()
@click.argument("name")
@note_option
@click.option(
    "--until",
    "until_text",
    metavar="TIME",
    help="Resume by itself then (Beat resumes it): a duration from now (2h, 30m, 1h30m, "
    "1d) or an ISO 8601 time with an offset.",
)
@actor_option
@click.pass_context
@gaffer_errors
def pause(
    ctx: click.Context, name: str, note: str | None, until_text: str | None, actor: str | None
) -> None:
    """Pause schedule NAME (its fires while paused are never sent).

    --until resumes it by itself at that time: Beat then sends the fires from that time
    on under its catch-up policy. Pausing a paused schedule with --note or --until
    replaces that one and keeps the other.
    """
    until = None if until_text is None else later_option(until_text, "--until", utcnow())
    stored = store_of(ctx, check_tasks=False, actor=actor).pause(name, note=note, until=until)
    resumes = stored.paused_until
    echo(f"paused {name}" + ("" if resumes is None else f" until {when(resumes)}"))


@gaffer.command()
@click.argument("name")
@note_option
@dry_run_option
@actor_option
@click.pass_context
@gaffer_errors
def resume(
    ctx: click.Context, name: str, note: str | None, dry_run: bool, actor: str | None
) -> None:
    """Resume schedule NAME from its next nominal time (fires while paused are not sent).

    --dry-run shows the next fires and how many fires while paused are not sent.
    """
    store = store_of(ctx, actor=actor)
    if dry_run:
        preview = store.preview_resume(name)
        show_preview(preview, zone_of(store.get(name).schedule))
        return
    stored = store.resume(name, note=note)
    echo(f"resumed {name}, next fire {when(stored.next_fire_at, zone_of(stored.schedule))}")


@gaffer.command()
@click.argument("name")
@note_option
@actor_option
@click.pass_context
@gaffer_errors
def remove(ctx: click.Context, name: str, note: str | None, actor: str | None) -> None:
    """Remove schedule NAME (its history stays until cleanup)."""
    store_of(ctx, check_tasks=False, actor=actor).remove(name, note=note)
    echo(f"removed {name}")


@gaffer.command()
@click.argument("name")
@note_option
@actor_option
@click.pass_context
@gaffer_errors
def trigger(ctx: click.Context, name: str, note: str | None, actor: str | None) -> None:
    """Send one fire of NAME now, with its own key."""
    key = store_of(ctx, check_tasks=False, actor=actor).trigger(name, note=note)
    echo(f"sent {key}")


_TIME_HELP = (
    "ISO 8601: 2026-11-30, 2026-11-30 21:30, 2026-11-30T21:30:00, with Z or +01:00 or without (UTC)"
)


@gaffer.command()
@click.argument("name")
@click.option("--from", "start", required=True, metavar="TIME", help=f"Exclusive. {_TIME_HELP}.")
@click.option("--to", "end", required=True, metavar="TIME", help="Inclusive; not in the future.")
@click.option(
    "--limit",
    type=click.IntRange(min=1),
    default=10_000,
    show_default=True,
    help="Refuse a range of more fires than this.",
)
@dry_run_option
@note_option
@actor_option
@click.pass_context
@gaffer_errors
def backfill(
    ctx: click.Context,
    name: str,
    start: str,
    end: str,
    limit: int,
    dry_run: bool,
    note: str | None,
    actor: str | None,
) -> None:
    """Send the fires F of NAME with FROM < F <= TO that were never sent.

    FROM is exclusive and TO inclusive: --from 2026-11-30 --to 2026-12-01 sends a daily
    00:00 UTC fire of 2026-12-01, not the one of 2026-11-30. A time without an offset is
    UTC. Fires already in the ledger (sent by Beat, a trigger or an earlier backfill) are
    not sent again; more than --limit fires in the range is refused. --dry-run lists the
    fires it would send (the first 20) and how many are in the ledger, sending nothing.
    """
    after = instant_option(start, "--from")
    until = instant_option(end, "--to")
    if until <= after:
        raise click.BadParameter(
            f"must be later than --from ({when(after)}), got {when(until)}", param_hint="--to"
        )
    store = store_of(ctx, check_tasks=False, actor=actor)
    if dry_run:
        preview = store.preview_backfill(name, after, until, limit=limit)
        first = f" (the first {LISTED_FIRES})" if len(preview.fires) == LISTED_FIRES else ""
        show_preview(preview, zone_of(store.get(name).schedule), f"fires it sends{first}:")
        return
    report = store.backfill(name, after, until, limit=limit, note=note)
    echo(
        f"sent {report.sent} fires of {name} in ({when(after)}, {when(until)}]; "
        f"{report.already} were already in the ledger"
    )
