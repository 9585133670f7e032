"""Business calendars through real ticks: fires on holidays skipped (recorded, never
late, not counted by ``max_runs``) or moved (sent once), and stored calendars.

Real SQLite and PostgreSQL, real Redis; Beat in-process with an injected clock.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import date, datetime, timezone

import pytest
from celery import Celery
from sqlalchemy import select

from celery_gaffer import InvalidInput, Scheduler, ScheduleStore, cron
from celery_gaffer.beat.health import all_health
from celery_gaffer.store import database_for

from ...support import FrozenClock, gaffer_cli, message_headers, noop_app

UTC = timezone.utc


@pytest.fixture
def app(database_url: str, redis_url: str) -> Iterator[Celery]:
    with noop_app("calendars-test", database_url, redis_url) as app:
        yield app


def sent(redis_url: str, name: str) -> list[str]:
    return [
        h["gaffer_nominal_at"] for h in message_headers(redis_url) if h["gaffer_schedule"] == name
    ]


def ledger(app: Celery, name: str) -> list[tuple[str, str, str | None]]:
    database = database_for(app)
    fires = database.models.Fire
    with database.read() as conn:
        rows = conn.execute(
            select(fires.nominal_at, fires.state, fires.reason)
            .where(fires.schedule == name)
            .order_by(fires.nominal_at)
        ).all()
    return [(f"{n:%m-%d %H:%M}", state, reason) for n, state, reason in rows]


def run_until(beat: Scheduler, clock: FrozenClock, end: datetime, step: float = 1800) -> None:
    while clock() < end:
        clock.advance(step)
        beat.tick()


def test_holidays_are_skipped_recorded_never_late_and_not_counted_by_max_runs(
    app: Celery, clock: FrozenClock, redis_url: str
) -> None:
    clock.now = datetime(2026, 12, 24, 8, tzinfo=UTC)
    store = ScheduleStore(app, clock=clock)
    gb = {"skip_on": ["holidays:GB"]}
    store.add("daily", "t.noop", cron("0 9 * * *", "Europe/London"), gaffer={**gb, "max_runs": 3})
    store.add("fridays", "t.noop", cron("0 9 * * 5", "Europe/London"), gaffer=gb)
    beat = Scheduler(app, clock=clock)
    run_until(beat, clock, datetime(2026, 12, 30, 12, tzinfo=UTC))
    # Three runs: Christmas, Boxing Day and Boxing Day observed are not runs.
    assert sent(redis_url, "daily") == [
        "2026-12-24T09:00:00Z", "2026-12-27T09:00:00Z", "2026-12-29T09:00:00Z"
    ]  # fmt: skip
    assert store.get("daily").fired_count == 3
    assert store.get("daily").finished
    skipped = [row for row in ledger(app, "daily") if row[1] == "skipped"]
    assert skipped == [
        ("12-25 09:00", "skipped", "2026-12-25: Christmas Day, holidays:GB → skipped"),
        ("12-26 09:00", "skipped", "2026-12-26: Boxing Day, holidays:GB → skipped"),
        ("12-28 09:00", "skipped",
         "2026-12-28: Boxing Day (observed), holidays:GB → skipped"),
    ]  # fmt: skip
    # The Friday schedule's only fire since it was added was Christmas: nothing is late.
    # Its next fire is 8 January (New Year's Day is a Friday holiday too): the skipped
    # fires are recorded by the tick that reaches it.
    assert sent(redis_url, "fridays") == []
    assert store.get("fridays").next_fire_at == datetime(2027, 1, 8, 9, tzinfo=UTC)
    database = database_for(app)
    with database.read() as conn:
        health = {
            h.schedule: h for h in all_health(conn, database.models, clock(), database.settings)
        }
    assert health["fridays"].state == "ok"
    assert health["daily"].state == "late"  # its runs never ran (no worker here)...
    assert health["daily"].due_nominal_at == datetime(
        2026, 12, 29, 9, tzinfo=UTC
    )  # ...not a holiday


def test_a_moved_fire_is_sent_once_at_the_same_local_time_with_its_reason(
    app: Celery, clock: FrozenClock, redis_url: str
) -> None:
    clock.now = datetime(2026, 12, 24, 8, tzinfo=UTC)
    store = ScheduleStore(app, clock=clock)
    store.add_calendar("freeze", ["2026-12-31"])
    store.add(
        "weekdays", "t.noop", cron("0 9 * * *", "Europe/London"),
        gaffer={"skip_on": ["weekends", "holidays:GB"], "on_skip": "next_day"},
    )  # fmt: skip
    store.add(
        "thursdays", "t.noop", cron("0 9 * * 4", "Europe/London"),
        gaffer={"skip_on": ["freeze"], "on_skip": "previous_day"},
    )  # fmt: skip
    beat = Scheduler(app, clock=clock)
    run_until(beat, clock, datetime(2026, 12, 31, 12, tzinfo=UTC))
    # Christmas, the weekend and Boxing Day observed all move to Tuesday 29: one fire.
    assert sent(redis_url, "weekdays") == [
        "2026-12-24T09:00:00Z", "2026-12-29T09:00:00Z", "2026-12-30T09:00:00Z",
        "2026-12-31T09:00:00Z",
    ]  # fmt: skip
    assert [row[1] for row in ledger(app, "weekdays")] == ["sent"] * 4
    # Thursday 31 is frozen: its fire went out on Wednesday 30 at 09:00, with the reason.
    assert sent(redis_url, "thursdays") == ["2026-12-24T09:00:00Z", "2026-12-30T09:00:00Z"]
    assert ledger(app, "thursdays")[-1] == (
        "12-30 09:00", "sent", "2026-12-31: in freeze → moved to 2026-12-30"
    )  # fmt: skip
    with pytest.raises(InvalidInput, match="thursdays") as caught:
        store.remove_calendar("freeze")
    assert caught.value.field == "name"


def test_stored_calendars_through_the_store_and_the_cli(app: Celery, clock: FrozenClock) -> None:
    store = ScheduleStore(app, clock=clock)
    added = gaffer_cli(app, "calendars", "add", "month-end-freeze", "2026-12-28", "2026-12-29")
    assert added.exit_code == 0, added.output
    assert "2 dates added" in added.output
    assert store.calendars() == {"month-end-freeze": [date(2026, 12, 28), date(2026, 12, 29)]}
    listed = gaffer_cli(app, "calendars", "list")
    assert "month-end-freeze  2" in listed.output
    assert "2026-12-28" in listed.output
    bad = gaffer_cli(app, "calendars", "add", "freeze", "2026-13-01")
    assert bad.exit_code == 2
    assert "days:" in bad.stderr
    with pytest.raises(InvalidInput) as missing:
        store.add("x", "t.noop", cron("0 9 * * *"), gaffer={"skip_on": ["nope"]})
    assert missing.value.field == "gaffer.skip_on"
    one = gaffer_cli(app, "calendars", "remove", "month-end-freeze", "2026-12-28")
    assert "1 dates removed" in one.output
    whole = gaffer_cli(app, "calendars", "remove", "month-end-freeze")
    assert whole.exit_code == 0, whole.output
    assert store.calendars() == {}
    unknown = gaffer_cli(app, "calendars", "remove", "month-end-freeze")
    assert unknown.exit_code == 2
    assert "no stored calendar" in unknown.stderr
    actions = [entry.action for entry in store.audit()]
    assert actions.count("calendar_add") == 1
    assert actions.count("calendar_remove") == 2


def test_explain_shows_each_skipped_or_moved_fire_with_its_reason(app: Celery) -> None:
    store = ScheduleStore(app)
    store.add_calendar("freeze", ["2026-12-23"])
    store.add(
        "weekdays", "t.noop", cron("0 9 * * *", "Europe/London"),
        gaffer={"skip_on": ["holidays:GB", "freeze"], "on_skip": "next_day"},
    )  # fmt: skip
    result = gaffer_cli(app, "explain", "weekdays", "--from", "2026-12-22", "--count", "8")
    assert result.exit_code == 0, result.stderr
    lines = result.output.splitlines()
    boxing = lines.index(
        "   calendar: 2026-12-28: Boxing Day (observed), holidays:GB → moved to 2026-12-29"
    )
    assert lines[boxing - 1].startswith("Mon 2026-12-28 09:00 GMT")
    assert "   calendar: 2026-12-23: in freeze → moved to 2026-12-24" in lines
    assert "   calendar: 2026-12-25: Christmas Day, holidays:GB → moved to 2026-12-27" in lines
    as_json = json.loads(gaffer_cli(app, "explain", "weekdays", "--from", "2026-12-22",
                                    "--json").output)  # fmt: skip
    assert as_json["calendar"][0] == "2026-12-23: in freeze → moved to 2026-12-24"
