"""``gaffer explain``: the next fires of a schedule and which DST rule applied to them.

``--cron``/``--every`` need no database (nor a migrated one); ``NAME`` reads the stored
schedule. The work is done by :mod:`celery_gaffer.schedules.explain` (pure).
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta

import click

from ..clock import utcnow
from ..exceptions import InvalidInput
from ..schedules.calendars import CalendarView, Fate
from ..schedules.explain import (
    MAX_COUNT,
    RULE_TEXT,
    Explanation,
    Fire,
    Rule,
    Transition,
    explain_around,
    offset_text,
    parse_day,
    parse_start,
)
from ..schedules.explain import explain as explain_schedule
from ..schedules.kinds import At, Cron, Every, Schedule, cron, every
from .base import echo, gaffer, gaffer_errors, store_of


@gaffer.command()
@click.argument("name", required=False)
@click.option("--cron", "cron_expr", help="Explain this cron expression (no schedule needed).")
@click.option("--tz", default=None, help="Zone of --cron (default UTC), or to show --every in.")
@click.option("--every", "every_seconds", help="Explain an interval of this many seconds.")
@click.option("--count", "count_text", default="10", show_default=True, help="Fires to list.")
@click.option("--around", help="Fires around this local date (YYYY-MM-DD) and its DST changes.")
@click.option(
    "--from",
    "start_text",
    help=(
        "First fire at or after this time (default: now); ISO 8601, in the schedule's"
        " zone unless it has an offset (Z, +01:00)."
    ),
)
@click.option("--json", "as_json", is_flag=True, help="One JSON object.")
@click.pass_context
@gaffer_errors
def explain(
    ctx: click.Context,
    name: str | None,
    cron_expr: str | None,
    tz: str | None,
    every_seconds: str | None,
    count_text: str,
    around: str | None,
    start_text: str | None,
    as_json: bool,
) -> None:
    """The next fires of schedule NAME (or of --cron EXPR --tz ZONE, or --every SECONDS),
    in its zone and in UTC, and what every DST change among them does to it."""
    schedule, enabled = _schedule(ctx, name, cron_expr, tz, every_seconds)
    view = None if name is None else _calendar_view(ctx, name, schedule)
    count = _count(count_text)
    zone = tz if isinstance(schedule, Every) else schedule.tz if isinstance(schedule, At) else None
    if around is not None and start_text is not None:
        raise InvalidInput("around: give --around or --from, not both", field="around")
    if around is not None:
        explanation = explain_around(schedule, parse_day(around), count, zone=zone)
    else:
        shown_in = schedule.tz if isinstance(schedule, (Cron, At)) else (tz or "UTC")
        start = utcnow() if start_text is None else parse_start(start_text, shown_in)
        explanation = explain_schedule(schedule, start, count, zone=zone)
    fates = _fates(view, explanation)
    if as_json:
        extra = {"name": name, "enabled": enabled, "jitter": schedule.jitter}
        calendar = {"calendar": [fate.text for fate in fates.values()]} if view else {}
        echo(json.dumps({**extra, **explanation.to_json(), **calendar}))
        return
    _print(explanation, name, fates)
    if schedule.jitter:
        echo(
            f"note: jitter: each fire is sent up to {schedule.jitter:g}s after the nominal"
            " time shown (the same delay every time for a given fire)"
        )
    if not enabled:
        echo(f"note: {name} is paused: it fires these times only once resumed")


def _schedule(
    ctx: click.Context,
    name: str | None,
    cron_expr: str | None,
    tz: str | None,
    every_seconds: str | None,
) -> tuple[Schedule, bool]:
    """The schedule to explain, and whether it is enabled (a stored one may be paused)."""
    if name is not None:
        if cron_expr is not None or every_seconds is not None or tz is not None:
            raise InvalidInput(
                "name: give a schedule NAME or --cron/--every (with --tz), not both",
                field="name",
            )
        stored = store_of(ctx, check_tasks=False).get(name)
        if stored.schedule is None:
            raise InvalidInput(f"name: schedule {name!r} is in error: {stored.error}", field="name")
        return stored.schedule, stored.enabled
    if (cron_expr is None) == (every_seconds is None):
        raise InvalidInput(
            "cron: give exactly one of a schedule NAME, --cron EXPR or --every SECONDS",
            field="cron",
        )
    if cron_expr is not None:
        return cron(cron_expr, tz or "UTC"), True
    try:
        seconds = float(every_seconds or "")
    except ValueError:
        raise InvalidInput(
            f"every: {every_seconds!r} is not a number of seconds", field="every"
        ) from None
    return every(seconds), True


def _calendar_view(ctx: click.Context, name: str, schedule: Schedule) -> CalendarView | None:
    """The stored schedule's calendars applied to it, if it has any."""
    store = store_of(ctx, check_tasks=False)
    rule = store.get(name).policy.bounds.calendar
    if rule is None or isinstance(schedule, At):
        return None
    if rule.stored_names:
        stored = store.calendars()
        rule = rule.with_stored({n: stored.get(n, []) for n in rule.stored_names})
    return CalendarView(schedule, rule)


def _fates(view: CalendarView | None, explanation: Explanation) -> dict[datetime, Fate]:
    """The listed fires the calendars skip or move, by fire."""
    if view is None or not explanation.fires:
        return {}
    first, last = explanation.fires[0].utc, explanation.fires[-1].utc
    return {
        fate.nominal: fate for fate in view.fates_between(first - timedelta(seconds=1), last, 100)
    }


def _count(text: str) -> int:
    try:
        count = int(text)
    except ValueError:
        count = 0
    if not 1 <= count <= MAX_COUNT:
        raise InvalidInput(
            f"count: must be a whole number from 1 to {MAX_COUNT}, got {text!r}", field="count"
        )
    return count


def _print(
    explanation: Explanation, name: str | None, fates: dict[datetime, Fate] | None = None
) -> None:
    fates = fates or {}
    prefix = f"{name}: " if name else ""
    echo(f"{prefix}{explanation.summary}")
    if not explanation.fires:
        echo("no fire: the expression matches no time within 50 years")
    rows = [_row(fire) for fire in explanation.fires]
    header = (f"LOCAL ({explanation.zone})", "OFFSET", "UTC")
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(2)]

    def line(cells: tuple[str, str, str]) -> str:
        return f"{cells[0]:<{widths[0]}}  {cells[1]:<{widths[1]}}  {cells[2]}"

    if rows:
        echo(line(header))
    if isinstance(explanation.schedule, (Every, At)):
        for fire, row in zip(explanation.fires, rows, strict=True):
            echo(line(row))
            _print_fate(fates.get(fire.utc))
        changes = len(explanation.transitions)
        noun, verb = ("change", "moves") if changes == 1 else ("changes", "move")
        echo(
            f"DST: {RULE_TEXT[Rule.ELAPSED]}; {changes} offset {noun} of "
            f"{explanation.zone} in this window {verb} only the local times shown"
        )
        return
    pending = list(explanation.transitions)
    for fire, row in zip(explanation.fires, rows, strict=True):
        while pending and pending[0].at <= fire.utc:
            _print_change(pending.pop(0))
        echo(line(row))
        _print_fate(fates.get(fire.utc))
    for change in pending:
        _print_change(change)


def _print_fate(fate: Fate | None) -> None:
    if fate is not None:
        echo(f"   calendar: {fate.text}")


def _print_change(change: Transition) -> None:
    echo(f"-- {change.effect} [{change.rule}: {RULE_TEXT[change.rule]}]")


def _row(fire: Fire) -> tuple[str, str, str]:
    clock = "%H:%M:%S" if fire.utc.second else "%H:%M"
    local = fire.local.strftime(f"%a %Y-%m-%d {clock}")
    utc = fire.utc.strftime(f"%Y-%m-%d {clock}Z")
    return (f"{local} {fire.abbreviation}", offset_text(fire.offset), utc)
