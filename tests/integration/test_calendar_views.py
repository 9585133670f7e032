"""Calendars where a schedule's next fires are told or computed, on real SQLite files and
PostgreSQL: ``schedules --json`` gives the reasons ``explain --json`` gives, and
previews, ``resume`` and ``add_many`` read the stored calendars' dates (once for a whole
load) and refuse an unknown one naming ``gaffer.skip_on``."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime, timezone
from typing import Any

import pytest
from celery import Celery
from sqlalchemy import event

from celery_gaffer import ScheduleStore, cron, every
from celery_gaffer.exceptions import InvalidInput
from celery_gaffer.store import database_for

from ..support import FrozenClock, gaffer_cli, noop_app

UTC = timezone.utc
BOXING_DAY = "2026-12-28: Boxing Day (observed), holidays:GB → moved to 2026-12-29"
FREEZE = {"skip_on": ["freeze"]}


@pytest.fixture
def app(database_url: str) -> Iterator[Celery]:
    with noop_app("calendar-views-test", database_url) as app:
        yield app


@pytest.fixture
def store(app: Celery, clock: FrozenClock) -> ScheduleStore:
    clock.now = datetime(2026, 12, 27, 12, tzinfo=UTC)
    store = ScheduleStore(app, clock=clock)
    store.add_calendar("freeze", ["2026-12-28", "2026-12-29"])
    return store


def at(day: str) -> datetime:
    return datetime.fromisoformat(f"{day}T09:00+00:00")


def test_schedules_json_gives_the_reasons_explain_json_gives(
    app: Celery, store: ScheduleStore
) -> None:
    store.add(
        "mondays", "t.noop", cron("0 9 * * 1", "Europe/London"),
        gaffer={"skip_on": ["holidays:GB"], "on_skip": "next_day"},
    )  # fmt: skip
    store.add("daily", "t.noop", cron("0 9 * * *"), gaffer=FREEZE)
    store.add("poll", "t.noop", every(60))
    listed = gaffer_cli(app, "schedules", "--json")
    assert listed.exit_code == 0, listed.stderr
    rows = {row["name"]: row for row in map(json.loads, listed.stdout.splitlines())}
    assert rows["mondays"]["calendar"] == [BOXING_DAY]
    assert rows["daily"]["calendar"] == [
        "2026-12-28: in freeze → skipped", "2026-12-29: in freeze → skipped"
    ]  # fmt: skip
    assert rows["poll"]["calendar"] == []
    # The same fires explained from the first one the calendar moved.
    for name, first in (("mondays", "2026-12-28T09:00Z"), ("daily", "2026-12-28T09:00Z")):
        explained = gaffer_cli(app, "explain", name, "--from", first, "--json")
        assert explained.exit_code == 0, explained.stderr
        assert json.loads(explained.stdout)["calendar"] == rows[name]["calendar"]


def test_preview_update_and_update_skip_a_stored_calendars_dates(store: ScheduleStore) -> None:
    store.add("daily", "t.noop", cron("0 9 * * *"))
    preview = store.preview_update("daily", gaffer=FREEZE)
    assert preview.fires[:2] == [at("2026-12-30"), at("2026-12-31")]
    assert "next fire 2026-12-30 09:00" in preview.summary
    assert store.get("daily").policy.bounds.skip_on is None  # nothing written
    assert store.update("daily", gaffer=FREEZE).next_fire_at == preview.fires[0]
    with pytest.raises(InvalidInput, match="'nope'") as unknown:
        store.preview_update("daily", gaffer={"skip_on": ["nope"]})
    assert unknown.value.field == "gaffer.skip_on"


def test_preview_resume_and_resume_skip_a_stored_calendars_dates(
    store: ScheduleStore, clock: FrozenClock
) -> None:
    store.add("daily", "t.noop", cron("0 9 * * *"), gaffer={**FREEZE, "enabled": False})
    preview = store.preview_resume("daily")
    assert preview.fires[:2] == [at("2026-12-30"), at("2026-12-31")]
    assert store.resume("daily").next_fire_at == at("2026-12-30")
    # Paused until a time: Beat's resume_due reads the dates too.
    store.pause("daily", until=datetime(2026, 12, 27, 13, tzinfo=UTC))
    clock.now = datetime(2026, 12, 27, 14, tzinfo=UTC)
    assert store.resume_due() == ["daily"]
    assert store.get("daily").next_fire_at == at("2026-12-30")


def test_add_many_reads_the_stored_calendars_once_and_refuses_an_unknown_one(
    app: Celery, store: ScheduleStore
) -> None:
    statements: list[str] = []

    def seen(conn: Any, cursor: Any, statement: str, *rest: Any) -> None:
        if "calendar_days" in statement:
            statements.append(statement)

    engine = database_for(app).engine
    event.listen(engine, "before_cursor_execute", seen)
    try:
        entries = [
            {"name": f"tenant-{n}", "task": "t.noop", "schedule": cron(f"{n} 9 * * *"),
             "gaffer": FREEZE}
            for n in range(30)
        ]  # fmt: skip
        assert store.add_many(entries, chunk_size=7) == 30
    finally:
        event.remove(engine, "before_cursor_execute", seen)
    assert len(statements) == 1
    assert store.get("tenant-5").next_fire_at == datetime(2026, 12, 30, 9, 5, tzinfo=UTC)
    bad = [{"name": "x", "task": "t.noop", "schedule": cron("0 9 * * *"), "gaffer": {
        "skip_on": ["nope"]}}]  # fmt: skip
    with pytest.raises(InvalidInput, match="no stored calendar named 'nope'") as unknown:
        store.add_many(bad)
    assert unknown.value.field == "gaffer.skip_on"
