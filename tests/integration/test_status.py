"""`gaffer status` through the real click group on real databases (SQLite and PostgreSQL):
a fixed number of statements whatever the number of schedules, each state word right,
``--problems``, and the text, the JSON and the console's alerts agreeing.

``status`` reads the real clock, so the schedules are set up around the real time with
margins of minutes."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from celery import Celery
from sqlalchemy import event, insert, update

from celery_gaffer import ScheduleStore, cron, every
from celery_gaffer.beat.health import all_health
from celery_gaffer.beat.survey import survey
from celery_gaffer.protocol import fire_key, fire_task_id
from celery_gaffer.schedules.display import when
from celery_gaffer.store import database_for
from celery_gaffer.store.models import table_of
from celery_gaffer.store.schedule_health import survey_rows
from celery_gaffer.web import create_app

from ..support import FrozenClock, gaffer_cli, noop_app
from .web.conftest import Client, tick_beat

UTC = timezone.utc
ALERTING = {"late", "failing", "error"}


@pytest.fixture
def app(database_url: str) -> Iterator[Celery]:
    with noop_app("status-test", database_url) as app:
        yield app


def statements_of(app: Celery, *args: str) -> tuple[Any, int]:
    """``celery gaffer ARGS`` and the number of statements it sent to the database."""
    engine = database_for(app).engine
    sent = []

    def count(*_: Any) -> None:
        sent.append(1)

    event.listen(engine, "before_cursor_execute", count)
    try:
        result = gaffer_cli(app, *args)
    finally:
        event.remove(engine, "before_cursor_execute", count)
    return result, len(sent)


def text_states(output: str) -> dict[str, str]:
    """``{schedule: state}`` of the status table (not its header or summary line)."""
    lines = output.splitlines()
    assert lines[0].split() == [
        "SCHEDULE",
        "STATE",
        "LAST",
        "SUCCESS",
        "NEXT",
        "RUN",
        "FAILURES",
        "REASON",
    ]
    assert re.fullmatch(r"(\d+ of )?\d+ schedules( not ok)?; database .+", lines[-1]), lines[-1]
    return {line.split()[0]: line.split()[1] for line in lines[1:-1]}


def json_states(output: str) -> dict[str, str]:
    return {line["schedule"]: line["state"] for line in map(json.loads, output.splitlines())}


def set_row(app: Celery, name: str, **values: Any) -> None:
    """Write columns of a schedule row as Beat or the run recorder would."""
    database = database_for(app)
    table = table_of(database.models.Schedule)
    with database.begin() as conn:
        conn.execute(update(table).where(table.c.name == name).values(**values))


def past_store(app: Celery, ago: timedelta) -> ScheduleStore:
    return ScheduleStore(app, clock=FrozenClock(datetime.now(UTC) - ago))


@pytest.mark.parametrize("output", [(), ("--json",), ("--problems",), ("--problems", "--json")])
def test_status_sends_as_many_statements_for_200_schedules_as_for_10(
    app: Celery, output: tuple[str, ...]
) -> None:
    # Added three hours ago and no Beat since: every stored word is stale, so every row
    # is evaluated with Beat's rules, the ledger looked up for each.
    store = past_store(app, timedelta(hours=3))
    store.add_many(
        {"name": f"s{i:03d}", "task": "t.noop", "schedule": every(600)} for i in range(10)
    )
    small, small_count = statements_of(app, "status", *output)
    assert small.exit_code == 1, small.stderr
    store.add_many(
        {"name": f"s{i:03d}", "task": "t.noop", "schedule": cron("*/10 * * * *", "Europe/Paris")}
        for i in range(10, 200)
    )
    large, large_count = statements_of(app, "status", *output)
    assert large.exit_code == 1, large.stderr
    states = json_states(large.stdout) if "--json" in output else text_states(large.stdout)
    assert len(states) == 200
    assert set(states.values()) == {"late"}
    assert large_count == small_count


def test_each_state_word_is_right_and_text_json_problems_and_alerts_agree(app: Celery) -> None:
    now = datetime.now(UTC)
    store = ScheduleStore(app)
    old = past_store(app, timedelta(hours=3))
    store.add("ok-fresh", "t.noop", every(86400, anchor=now + timedelta(hours=1)))
    old.add("late", "t.noop", every(600))
    old.add("late-in-paris", "t.noop", cron("*/10 * * * *", "Europe/Paris"))
    old.add("ok-evaluated", "t.noop", every(600))
    # Its word is stale, but its latest due fire has succeeded.
    due = every(600).last_at_or_before(now - timedelta(minutes=1))
    set_row(app, "ok-evaluated", last_success_nominal_at=due, last_success_at=due)
    store.add("failing", "t.noop", every(86400, anchor=now + timedelta(hours=1)))
    set_row(app, "failing", consecutive_failures=3, check_at=now - timedelta(seconds=1))
    store.add("stored-late", "t.noop", every(86400, anchor=now + timedelta(hours=1)))
    old.add("paused", "t.noop", every(600))
    store.pause("paused")
    store.add("error", "t.noop", every(600))
    set_row(app, "error", error="task: 't.gone' is not registered with this Beat's app")
    expected = {
        "ok-fresh": "ok",
        "late": "late",
        "late-in-paris": "late",
        "ok-evaluated": "ok",
        "failing": "failing",
        "stored-late": "ok",
        "paused": "paused",
        "error": "error",
    }

    text = gaffer_cli(app, "status")
    assert text.exit_code == 1, text.stderr
    assert text_states(text.stdout) == expected
    assert text.stdout.splitlines()[-1].startswith("8 schedules; database ")
    as_json = gaffer_cli(app, "status", "--json")
    assert as_json.exit_code == 1
    assert json_states(as_json.stdout) == expected
    problems = {name: state for name, state in expected.items() if state != "ok"}
    only = gaffer_cli(app, "status", "--problems")
    assert only.exit_code == 1
    assert text_states(only.stdout) == problems
    assert only.stdout.splitlines()[-1].startswith("5 of 8 schedules not ok; database ")
    only_json = gaffer_cli(app, "status", "--problems", "--json")
    assert only_json.exit_code == 1
    assert json_states(only_json.stdout) == problems

    # Every line says why, the late fire in the schedule's zone (UTC with --utc).
    lines = {json.loads(line)["schedule"]: json.loads(line) for line in as_json.stdout.splitlines()}
    late_since = datetime.fromisoformat(lines["late-in-paris"]["late_since"])
    shown = when(late_since, ZoneInfo("Europe/Paris"))
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d CES?T \((\d{4}-\d\d-\d\d )?\d\d:\d\dZ\)", shown)
    late_line = next(line for line in text.stdout.splitlines() if line.startswith("late-in-paris "))
    assert late_line.endswith(f"the fire of {shown} has not succeeded")
    assert lines["failing"]["reason"] == "3 consecutive failed runs"
    assert lines["error"]["error"] == "task: 't.gone' is not registered with this Beat's app"
    # (status read the clock between the two readings here)
    due_then = {
        str(every(600).last_at_or_before(moment - timedelta(minutes=1)).isoformat())  # type: ignore[union-attr]
        for moment in (now, datetime.now(UTC))
    }
    assert lines["late"]["late_since"] in due_then

    # The console's alerts (page and API) list the same late, failing and error ones
    # (with a Beat ticking: else the console says no Beat is running instead).
    tick_beat(app, datetime.now(UTC))
    client = Client(create_app(app, token="", clock=lambda: datetime.now(UTC)))
    try:
        listed = client.get("/api/alerts").json()
        page = client.get("/alerts").text
    finally:
        client.close()
    alerting = {name: state for name, state in expected.items() if state in ALERTING}
    assert {row["schedule"]: row["state"] for row in listed} == alerting
    for row in listed:  # the same reason as the text's last column
        line = next(
            line for line in text.stdout.splitlines() if line.startswith(row["schedule"] + " ")
        )
        assert line.endswith(row["reason"])
    assert sorted(re.findall(r'<tr data-schedule="([^"]*)">', page)) == sorted(alerting)


def test_status_exits_0_and_problems_lists_only_the_paused_when_nothing_alerts(
    app: Celery,
) -> None:
    store = ScheduleStore(app)
    now = datetime.now(UTC)
    store.add("fine", "t.noop", every(86400, anchor=now + timedelta(hours=1)))
    store.add("resting", "t.noop", every(60))
    store.pause("resting")
    result = gaffer_cli(app, "status", "--problems")
    assert result.exit_code == 0, result.stderr
    assert text_states(result.stdout) == {"resting": "paused"}
    assert gaffer_cli(app, "status").exit_code == 0


def test_a_row_whose_definition_cannot_be_read_is_an_error_not_a_crash(app: Celery) -> None:
    store = ScheduleStore(app)
    store.add("fine", "t.noop", every(86400, anchor=datetime.now(UTC) + timedelta(hours=1)))
    store.add("broken", "t.noop", every(86400, anchor=datetime.now(UTC) + timedelta(hours=1)))
    set_row(app, "broken", schedule={"kind": "fortnightly"})
    result = gaffer_cli(app, "status", "--json")
    assert result.exit_code == 1, result.stderr
    assert json_states(result.stdout) == {"broken": "error", "fine": "ok"}


def add_fire(app: Celery, schedule: str, nominal: datetime) -> None:
    database = database_for(app)
    key = fire_key(schedule, nominal)
    with database.begin() as conn:
        conn.execute(
            insert(table_of(database.models.Fire)).values(
                schedule=schedule,
                nominal_at=nominal,
                key=key,
                task_id=fire_task_id(key),
                kind="scheduled",
                state="sent",
                publish_after=nominal,
                publish_count=1,
                created_at=nominal,
            )
        )


@pytest.mark.parametrize("grace", [None, 90.5, 0.001])
def test_the_ledger_lookup_counts_a_fire_from_the_instant_its_grace_ends(
    app: Celery, grace: float | None
) -> None:
    """What the survey's one statement looks up is what a query per schedule finds: the
    newest fire ``F`` with ``F + grace <= now``, to the millisecond on SQLite too."""
    start = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
    ScheduleStore(app, clock=FrozenClock(start)).add(
        "hourly", "t.noop", every(3600), gaffer={"grace": grace} if grace is not None else None
    )
    set_row(app, "hourly", health="late")  # a word to re-check: the ledger is looked up
    first, second = start + timedelta(hours=1), start + timedelta(hours=2)
    add_fire(app, "hourly", first)
    add_fire(app, "hourly", second)
    database = database_for(app)
    seconds = database.settings.default_grace if grace is None else grace
    ends = second + timedelta(seconds=seconds)
    for now, expected in [
        (ends, second),
        (ends - timedelta(milliseconds=1), first),
        (ends + timedelta(microseconds=999), second),
        (first, None),
    ]:
        with database.read() as conn:
            [row] = survey_rows(conn, database.models, now, database.settings.default_grace)
            assert row["ledger_latest"] == expected, now
            # The same health as Beat's evaluation with a query of its own for the row.
            [(_, surveyed)] = survey(conn, database.models, now, database.settings)
            [alone] = all_health(conn, database.models, now, database.settings)
            assert surveyed == alone


def test_a_stored_ok_word_is_not_looked_up_and_its_row_needs_no_evaluation(app: Celery) -> None:
    now = datetime.now(UTC)
    ScheduleStore(app).add("fresh", "t.noop", every(86400, anchor=now + timedelta(hours=1)))
    database = database_for(app)
    with database.read() as conn:
        [row] = survey_rows(conn, database.models, now, database.settings.default_grace)
        assert row["stored_ok"]
        assert row["ledger_latest"] is None
        assert row["watermark_at"] is None  # not read: the row is not evaluated
        [(_, health)] = survey(conn, database.models, now, database.settings)
    assert health.state == "ok"


def test_schedules_sharing_a_timing_get_beat_s_own_health_each(app: Celery) -> None:
    """The survey evaluates a timing once for the rows that share it: each row still gets
    exactly what Beat's evaluation with a query of its own gives it."""
    start = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
    store = ScheduleStore(app, clock=FrozenClock(start))
    timings = [every(600), cron("*/10 * * * *", "Europe/Paris")]
    store.add_many(
        {"name": f"t{i:02d}", "task": "t.noop", "schedule": timings[i % 2]} for i in range(12)
    )
    now = start + timedelta(hours=3, seconds=5)
    due = now - timedelta(minutes=11)  # succeeded at the latest due fire: ok
    for i in range(0, 12, 3):
        set_row(app, f"t{i:02d}", last_success_nominal_at=due.replace(second=0, minute=50))
    for i in range(1, 12, 3):
        moment = start + timedelta(hours=1, seconds=i)
        set_row(app, f"t{i:02d}", last_success_at=moment, consecutive_failures=i)
    add_fire(app, "t04", start + timedelta(hours=2, minutes=50))
    database = database_for(app)
    with database.read() as conn:
        surveyed = [health for _, health in survey(conn, database.models, now, database.settings)]
        alone = all_health(conn, database.models, now, database.settings)
    assert surveyed == alone
    assert {health.state for health in surveyed} == {"ok", "late", "failing"}
