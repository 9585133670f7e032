"""``gaffer simulate``: what Beat would do with each fire of a time window, outages
included, decided by Beat's own code on a virtual clock (:mod:`celery_gaffer.beat.simulation`).

The schedules and stored calendars are read once, in a read-only transaction; nothing
is written and nothing is published.
"""

from __future__ import annotations

import json
from datetime import tzinfo
from fnmatch import fnmatchcase

import click

from ..beat.catchup import on_time_for
from ..beat.simulation import Fated, Outage, Subject, simulate
from ..exceptions import InvalidInput
from ..schedules.cron_engine import load_zone
from ..store.calendars import loader as calendar_loader
from ..store.schedules import list_schedules
from .base import app_of, echo, gaffer, gaffer_errors, ready, table
from .times import aware_option, when


@gaffer.command("simulate")
@click.option(
    "--from", "start_text", required=True, help="Start of the window (ISO 8601 with an offset)."
)
@click.option(
    "--to", "end_text", required=True, help="End of the window (ISO 8601 with an offset)."
)
@click.option(
    "--down",
    "down_texts",
    multiple=True,
    metavar="T3/T4",
    help="Beat is down after T3 and starts again at T4 (ISO 8601 with offsets); repeatable.",
)
@click.option(
    "--name",
    "pattern",
    default="*",
    show_default=True,
    help="Only the schedules whose name matches this pattern (*, ?, [abc]).",
)
@click.option("--json", "as_json", is_flag=True, help="One JSON object per fire.")
@click.pass_context
@gaffer_errors
def simulate_command(
    ctx: click.Context,
    start_text: str,
    end_text: str,
    down_texts: tuple[str, ...],
    pattern: str,
    as_json: bool,
) -> None:
    """Rehearse Beat from --from to --to, down over each --down window: the fate of each
    fire (on_time, late, skipped, missed, calendar_skipped, moved), decided by Beat's own
    code on a virtual clock. Reads the stored schedules; never writes, never publishes.

    Each schedule starts as a Beat running until --from leaves it; a fire at --from is
    included. Beat is down after T3 (a fire at T3 is sent) and catches up at T4.
    """
    start = aware_option(start_text, "--from")
    end = aware_option(end_text, "--to")
    if end < start:
        raise InvalidInput(
            f"--to: {end.isoformat()} is before --from {start.isoformat()}", field="--to"
        )
    outages = [_outage(text) for text in down_texts]
    app = app_of(ctx)
    database = ready(ctx)
    subjects: list[Subject] = []
    with database.read() as conn:
        calendars = calendar_loader(conn, database.models)

        for row in list_schedules(conn, database.models):
            if not fnmatchcase(row.name, pattern) or row.schedule is None or row.error:
                continue
            subject = Subject(
                row.name, row.schedule, row.policy, row.watermark_at, row.fired_count,
                row.paused_until,
            )  # fmt: skip
            subjects.append(subject.with_stored_calendars(calendars))
    max_interval = float(app.conf.beat_max_loop_interval or _beat_max_interval())
    fates = simulate(
        subjects,
        start,
        end,
        outages,
        max_catchup=database.settings.max_catchup,
        on_time=on_time_for(max_interval),
    )
    if as_json:
        for fated in fates:
            echo(json.dumps(fated.to_json()))
        return
    if not fates:
        echo("no fire in the window")
        return
    table(
        ("SCHEDULE", "NOMINAL", "FATE", "SENT AT", "REASON"),
        [
            (
                f.schedule,
                when(f.nominal_at, _zone(f)),
                f.fate,
                when(f.sent_at, _zone(f)),
                f.reason or "-",
            )
            for f in fates
        ],
        last_wide=True,
    )


def _outage(text: str) -> Outage:
    first, slash, last = text.partition("/")
    if not slash:
        raise InvalidInput(
            f"--down: {text!r} is not START/END (two ISO 8601 times with offsets)",
            field="--down",
        )
    start, end = aware_option(first, "--down"), aware_option(last, "--down")
    if end <= start:
        raise InvalidInput(f"--down: {text!r} ends before it starts", field="--down")
    return Outage(start, end)


def _zone(fated: Fated) -> tzinfo | None:
    return None if fated.zone == "UTC" else load_zone(fated.zone)


def _beat_max_interval() -> float:
    from ..scheduler import Scheduler

    return float(Scheduler.max_interval)
