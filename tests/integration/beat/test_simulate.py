"""``gaffer simulate`` agrees with a real Beat: the same stored schedules, the same window
and the same outage (across Berlin's spring-forward night), run both ways; the fires
sent, when, and the ledger's missed and skipped fires match the fates simulate printed.
Simulate writes nothing."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime, timezone
from typing import Any

import pytest
from celery import Celery
from sqlalchemy import select

from celery_gaffer import cron, every
from celery_gaffer.protocol import FireState
from celery_gaffer.store import database_for
from celery_gaffer.testing import GafferBeat, VirtualClock

from ...support import gaffer_cli
from ..test_previews import database_rows

UTC = timezone.utc
START = "2027-03-27T06:00:00+00:00"
END = "2027-03-29T12:00:00+00:00"
# Beat down from 01:00 CET to 04:00 CEST on the night Berlin's clocks go forward.
LATER = "2027-03-30T13:00:00+00:00"
DOWN = ("2027-03-28T01:00:00+01:00", "2027-03-28T04:00:00+02:00")


def job(*args: Any, **kwargs: Any) -> None:
    return None


def utc(*parts: int) -> datetime:
    return datetime(*parts, tzinfo=UTC)


@pytest.fixture
def app(database_url: str) -> Iterator[Celery]:
    app = Celery("simulate-test", broker="memory://", set_as_current=False)
    app.conf.gaffer_database_url = database_url
    app.conf.gaffer_max_catchup = 3  # the 5-minute backlog takes several ticks
    app.task(name="t.job", shared=False)(job)
    yield app
    app.close()


def add_schedules(beat: GafferBeat) -> None:
    store = beat.store
    store.add_calendar("freeze", ["2027-03-29"])
    add = store.add
    add("berlin-0230", "t.job", cron("30 2 * * *", "Europe/Berlin"), gaffer={"catchup": "all"})
    add("ny-hourly", "t.job", cron("15 * * * *", "America/New_York"))  # latest
    add("skip-10m", "t.job", every(600), gaffer={"catchup": "skip"})
    add("all-5m", "t.job", every(300), gaffer={"catchup": "all"})
    add(
        "deadline-15m",
        "t.job",
        every(900),
        gaffer={"catchup": "all", "starting_deadline": 1800},
    )
    add(
        "jittered-hourly",
        "t.job",
        every(3600, jitter=300),
        gaffer={"catchup": "all", "max_runs": 19},
    )
    add(
        "saturday-0900",
        "t.job",
        cron("0 9 * * 6", "Europe/Berlin"),
        gaffer={"skip_on": ["weekends"], "on_skip": "next_day"},
    )
    add(
        "noon",
        "t.job",
        cron("0 12 * * *"),
        gaffer={"skip_on": ["weekends", "freeze"], "on_skip": "skip"},
    )


def simulated(app: Celery) -> list[dict[str, Any]]:
    result = gaffer_cli(
        app, "simulate", "--from", START, "--to", END, "--down", "/".join(DOWN), "--json"
    )
    assert result.exit_code == 0, (result.stdout, result.stderr)
    return [json.loads(line) for line in result.stdout.splitlines()]


def ledger(app: Celery, state: str, end: datetime) -> set[tuple[str, datetime, str | None]]:
    database = database_for(app)
    fire = database.models.Fire
    with database.read() as conn:
        rows = conn.execute(
            select(fire.schedule, fire.nominal_at, fire.reason).where(fire.state == state)
        ).all()
    found = {(r.schedule, _aware(r.nominal_at), r.reason) for r in rows}
    return {row for row in found if row[1] <= end}


def _aware(value: datetime) -> datetime:
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


def _at(text: str | None) -> datetime | None:
    return None if text is None else datetime.fromisoformat(text)


def test_simulate_agrees_with_a_real_beat_down_across_the_dst_change(app: Celery) -> None:
    beat = GafferBeat(app, VirtualClock(datetime.fromisoformat(START)))
    try:
        add_schedules(beat)
        before = database_rows(app)
        fates = simulated(app)
        assert database_rows(app) == before  # simulate wrote nothing

        beat.start(at=START)
        beat.down(DOWN[0], DOWN[1])
        # A day on: a calendar's skipped fires are recorded at the schedule's next tick.
        beat.advance(to=LATER)
    finally:
        beat.close()

    end = datetime.fromisoformat(END)
    real_sent = {(f.schedule, f.nominal_at, f.sent_at) for f in beat.sent if f.nominal_at <= end}
    sim_sent = {
        (f["schedule"], _at(f["nominal_at"]), _at(f["sent_at"]))
        for f in fates
        if f["fate"] in ("on_time", "late", "moved")
    }
    assert sim_sent == real_sent
    assert all(f["sent_at"] is None for f in fates if f["fate"] not in ("on_time", "late", "moved"))

    def fated(fate: str) -> set[tuple[str, datetime | None]]:
        return {(f["schedule"], _at(f["nominal_at"])) for f in fates if f["fate"] == fate}

    missed = ledger(app, FireState.MISSED, end)
    assert fated("missed") == {(name, nominal) for name, nominal, _ in missed}
    skipped = ledger(app, FireState.SKIPPED, end)
    assert {
        (f["schedule"], _at(f["nominal_at"]), f["reason"])
        for f in fates
        if f["fate"] == "calendar_skipped"
    } == skipped
    # Skipped by policy or by max_runs: never in the ledger.
    in_ledger = {(f.schedule, f.nominal_at) for f in beat.sent} | {(n, t) for n, t, _ in missed}
    assert fated("skipped")
    assert not fated("skipped") & in_ledger

    # What each rule did, as the real Beat did it too (checked above).
    by_key = {(f["schedule"], f["nominal_at"]): f for f in fates}

    def fate_of(name: str, nominal: datetime) -> tuple[str, datetime | None]:
        found = by_key[(name, nominal.isoformat())]
        return found["fate"], _at(found["sent_at"])

    restart = utc(2027, 3, 28, 2, 0)
    # 02:30 does not exist in Berlin that night: its fire is 03:00 CEST (01:00Z), in
    # the outage, sent late by catch-up when Beat starts again.
    assert fate_of("berlin-0230", utc(2027, 3, 28, 1, 0)) == ("late", restart)
    assert fate_of("berlin-0230", utc(2027, 3, 29, 0, 30)) == ("on_time", utc(2027, 3, 29, 0, 30))
    assert fate_of("ny-hourly", utc(2027, 3, 28, 0, 15))[0] == "skipped"
    assert fate_of("ny-hourly", utc(2027, 3, 28, 1, 15)) == ("late", restart)
    assert fate_of("skip-10m", utc(2027, 3, 28, 1, 50))[0] == "skipped"
    assert fate_of("skip-10m", restart) == ("on_time", restart)
    assert fate_of("all-5m", utc(2027, 3, 28, 0, 5)) == ("late", restart)
    assert fate_of("deadline-15m", utc(2027, 3, 28, 0, 0)) == ("on_time", utc(2027, 3, 28))
    assert fate_of("deadline-15m", utc(2027, 3, 28, 1, 15))[0] == "missed"
    assert fate_of("deadline-15m", utc(2027, 3, 28, 1, 30)) == ("late", restart)
    # Jittered: the 00:00Z fire was decided before the outage, to be sent a few minutes
    # later, while Beat was down: it goes when Beat starts again.
    assert fate_of("jittered-hourly", utc(2027, 3, 28, 0, 0)) == ("late", restart)
    # Its 19th and last run is the 01:00Z fire, caught up with the 02:00Z one, which
    # max_runs leaves out; then the schedule is done.
    assert fate_of("jittered-hourly", utc(2027, 3, 28, 1, 0)) == ("late", restart)
    assert fate_of("jittered-hourly", restart)[0] == "skipped"
    assert by_key[("jittered-hourly", restart.isoformat())]["reason"].startswith("max_runs")
    assert ("jittered-hourly", utc(2027, 3, 28, 3).isoformat()) not in by_key
    assert len(beat.sent_of("jittered-hourly")) == 19
    jittered = [f for f in fates if f["schedule"] == "jittered-hourly" and f["fate"] == "on_time"]
    assert all(f["reason"].startswith("jitter: sent ") for f in jittered)
    assert {_at(f["sent_at"]) for f in jittered}.isdisjoint(
        {_at(f["nominal_at"]) for f in jittered}
    )
    assert fate_of("saturday-0900", utc(2027, 3, 29, 7, 0)) == ("moved", utc(2027, 3, 29, 7, 0))
    assert fated("calendar_skipped") == {
        ("noon", utc(2027, 3, 27, 12, 0)),
        ("noon", utc(2027, 3, 28, 12, 0)),
        ("noon", utc(2027, 3, 29, 12, 0)),
    }
    assert set(f["fate"] for f in fates) == {
        "on_time", "late", "skipped", "missed", "calendar_skipped", "moved"
    }  # fmt: skip


@pytest.fixture
def sqlite_app(sqlite_url: str) -> Iterator[Celery]:
    app = Celery("simulate-cli-test", broker="memory://", set_as_current=False)
    app.conf.gaffer_database_url = sqlite_url
    app.task(name="t.job", shared=False)(job)
    yield app
    app.close()


def test_the_table_shows_each_fire_in_its_zone_and_the_name_pattern_selects(
    sqlite_app: Celery,
) -> None:
    beat = GafferBeat(sqlite_app, VirtualClock(datetime.fromisoformat(START)))
    add_schedules(beat)
    result = gaffer_cli(
        sqlite_app, "simulate", "--from", START, "--to", END, "--down", "/".join(DOWN),
        "--name", "berlin-*",
    )  # fmt: skip
    assert result.exit_code == 0, result.stderr
    assert result.stdout.splitlines() == [
        "SCHEDULE     NOMINAL                         FATE     SENT AT                         "
        "REASON",
        "berlin-0230  2027-03-28 03:00 CEST (01:00Z)  late     2027-03-28 04:00 CEST (02:00Z)  "
        "Beat was down: sent 1h late by catch-up (catchup 'all')",
        "berlin-0230  2027-03-29 02:30 CEST (00:30Z)  on_time  2027-03-29 02:30 CEST (00:30Z)  -",
    ]
    nothing = gaffer_cli(sqlite_app, "simulate", "--from", START, "--to", END, "--name", "x*")
    assert nothing.stdout == "no fire in the window\n"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--from", "2027-03-28T01:00", "--to", END), "--from"),
        (("--from", START, "--to", "2027-03-01T00:00Z"), "--to: "),
        (("--from", START, "--to", END, "--down", "2027-03-28T01:00Z"), "--down: "),
        (("--from", START, "--to", END, "--down", f"{END}/{START}"), "--down: "),
        (("--from", START, "--to", END, "--down", "2027-03-28T01:00Z/tomorrow"), "--down"),
    ],
)
def test_a_wrong_option_is_one_line_naming_it_and_exit_2(
    sqlite_app: Celery, args: tuple[str, ...], message: str
) -> None:
    result = gaffer_cli(sqlite_app, "simulate", *args)
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("error: ")
    assert message in lines[0]
