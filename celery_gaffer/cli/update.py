"""``gaffer update NAME``: change some fields of a schedule and show what fires next."""

from __future__ import annotations

from datetime import tzinfo
from typing import Any, cast

import click

from ..schedules.changes import ScheduleChanges, new_timing
from ..schedules.kinds import At
from ..schedules.preview import Preview
from ..store.schedule_rows import StoredSchedule
from .base import (
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
    store_of,
)
from .times import aware_option, when, zone_of

dry_run_option = click.option(
    "--dry-run", is_flag=True, help="Show what it would do (checked the same way); change nothing."
)

#: How many of the next fires ``update`` shows.
NEXT_FIRES = 3
_OPTIONS = "--cron, --every, --at, --tz, --jitter, --task, --args, --kwargs, --options, "
_OPTIONS += "--catchup, --overlap, --starting-deadline, --grace, --start-at, --end-at, "
_OPTIONS += "--max-runs, --ping-url, --skip-on, --on-skip or --no-skip-on"


@gaffer.command()
@click.argument("name")
@click.option(
    "--cron", "cron_expr", help="New cron expression; keeps the zone (UTC if it was --every)."
)
@click.option("--every", "every_seconds", type=float, help="New interval in whole seconds.")
@click.option(
    "--at",
    "at_text",
    help="Fire once, at this ISO 8601 time with an offset (a time already past: at once).",
)
@click.option("--tz", help="New IANA zone of the cron expression (cron schedules only).")
@click.option("--jitter", type=float, help="Delay each fire by up to this many s.")
@click.option("--task", help="New task name.")
@click.option("--args", "args_json", help="Positional arguments as a JSON list.")
@click.option("--kwargs", "kwargs_json", help="Keyword arguments as a JSON object.")
@click.option("--options", "options_json", help="Celery send options as a JSON object.")
@policy_options
@click.option(
    "--no-skip-on",
    is_flag=True,
    help="Take the schedule off its --skip-on calendars (clears --on-skip too).",
)
@dry_run_option
@click.option("--note", help="Why: kept in the audit log.")
@actor_option
@click.pass_context
@gaffer_errors
def update(
    ctx: click.Context,
    /,
    name: str,
    cron_expr: str | None,
    every_seconds: float | None,
    at_text: str | None,
    tz: str | None,
    jitter: float | None,
    task: str | None,
    args_json: str | None,
    kwargs_json: str | None,
    options_json: str | None,
    no_skip_on: bool,
    dry_run: bool,
    note: str | None,
    actor: str | None,
    **policy_values: Any,
) -> None:
    """Change only the given fields of schedule NAME and show its next fires.

    Everything is checked before anything is written. A paused schedule stays paused.
    A new timing (--cron, --every, --tz, --jitter) starts from now: its first fire is the
    first after the edit. Running Beats use the edit on their next tick. Schedules from
    app.conf.beat_schedule are changed there, not here. --dry-run checks the changes the
    same way and shows the timing and next fires they would give, changing nothing.
    """
    changes: dict[str, Any] = {
        key: value
        for key, value in (
            ("cron", cron_expr),
            ("every", every_seconds),
            ("schedule", None if at_text is None else At(aware_option(at_text, "--at"))),
            ("tz", tz),
            ("jitter", jitter),
            ("task", task),
            ("args", json_option(args_json, "--args")),
            ("kwargs", json_option(kwargs_json, "--kwargs")),
            ("options", json_option(options_json, "--options")),
        )
        if value is not None
    }
    policy = policy_of(policy_values)
    if no_skip_on:
        if "skip_on" in policy or "on_skip" in policy:
            fail("give --no-skip-on without --skip-on and --on-skip")
        policy["skip_on"] = []
    if policy:
        changes["gaffer"] = policy
    if not changes:
        fail(f"nothing to change: give at least one of {_OPTIONS}")
    if [cron_expr, every_seconds, at_text].count(None) < 2:
        fail("give only one of --cron EXPR, --every SECONDS or --at TIME")
    store = store_of(ctx, actor=actor)
    if dry_run:
        preview = store.preview_update(name, **changes)
        current = store.get(name).schedule
        timing = new_timing(name, current, cast(ScheduleChanges, changes))
        show_preview(preview, zone_of(timing or current))
        return
    before = store.get(name)
    after = store.update(name, note=note, **changes)
    differences = changed(before, after)
    if differences:
        echo(f"updated {name}:")
        for field, old, new in differences:
            echo(f"  {field}: {printable(old)} -> {printable(new)}")
    else:
        echo(f"{name} unchanged: it already had those values")
    for line in next_fires(after):
        echo(line)
    if after.source == "config":
        echo(
            f"note: {name} comes from app.conf.beat_schedule: Beat's next start puts back"
            " the configured values; change it there to keep this"
        )


def show_preview(preview: Preview, zone: tzinfo | None, heading: str = "next fires:") -> None:
    """A ``--dry-run``'s output: the preview's summary, its fires under ``heading``, and
    that nothing changed."""
    echo(preview.summary)
    if preview.fires:
        echo(heading)
    for fire in preview.fires:
        echo(f"  {when(fire, zone)}")
    echo("dry run: nothing was changed")


def changed(before: StoredSchedule, after: StoredSchedule) -> list[tuple[str, str, str]]:
    """``(field, old, new)`` of each field that differs, as the user would write it."""
    pairs = [
        ("schedule", describe(before.schedule), describe(after.schedule)),
        ("task", before.task, after.task),
        ("args", repr(before.args), repr(after.args)),
        ("kwargs", repr(before.kwargs), repr(after.kwargs)),
        ("options", repr(before.options), repr(after.options)),
    ]
    for field in ("catchup", "overlap", "starting_deadline", "grace"):
        pairs.append(
            (field, _policy_text(before, field), _policy_text(after, field)),
        )
    for field in ("skip_on", "on_skip"):
        old, new = getattr(before.policy.bounds, field), getattr(after.policy.bounds, field)
        pairs.append((field, _calendar_text(old), _calendar_text(new)))
    return [(field, old, new) for field, old, new in pairs if old != new]


def _calendar_text(value: tuple[str, ...] | str | None) -> str:
    if value is None:
        return "none"
    return value if isinstance(value, str) else ", ".join(value)


def _policy_text(stored: StoredSchedule, field: str) -> str:
    value = getattr(stored.policy, field)
    if value is None:
        return "default"
    return f"{value:g}s" if isinstance(value, float) else str(value)


def next_fires(stored: StoredSchedule) -> list[str]:
    """The lines saying when ``stored`` fires next (or why it does not)."""
    if not stored.enabled:
        return [f"paused: it fires again after `gaffer resume {stored.name}`"]
    if stored.schedule is None or stored.next_fire_at is None:
        return ["no fire to come"]
    zone = zone_of(stored.schedule)
    fires = [stored.next_fire_at]
    while len(fires) < NEXT_FIRES:
        following = stored.schedule.next_after(fires[-1])
        if following is None:
            break
        fires.append(following)
    return [f"next {len(fires)} fires:", *(f"  {when(fire, zone)}" for fire in fires)]
