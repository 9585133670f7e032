"""Rows and options no decoder or send can be trusted with: JSON nested too deeply (written
by hand into the row), a compression kombu does not know, a send that fails the same way
every time. Each puts only its own schedule in ``error``; listing, status and Beat go on.

Real SQLite and PostgreSQL, real Redis; Beat in-process with an injected clock.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from celery import Celery
from kombu import compression
from sqlalchemy import JSON, Text, cast, literal, update

from celery_gaffer import GafferError, Scheduler, ScheduleStore, every
from celery_gaffer.beat.health import all_health
from celery_gaffer.beat.publisher import send
from celery_gaffer.store import database_for
from celery_gaffer.store.fires import Fire
from celery_gaffer.store.schedules import Payload

from ...support import FrozenClock, gaffer_cli, message_headers, noop_app

# Python's decoder runs out of stack on this (PostgreSQL's own parser stops near 10,000).
DEEP = "[" * 5_000 + "]" * 5_000
NESTED_100 = "[" * 100 + "]" * 100  # decodes, but nests deeper than any input may


@pytest.fixture
def app(database_url: str, redis_url: str) -> Iterator[Celery]:
    with noop_app("bounded-test", database_url, redis_url) as app:
        yield app


def sent(redis_url: str) -> Counter[str]:
    return Counter(h["gaffer_schedule"] for h in message_headers(redis_url))


def write_json_text(app: Celery, name: str, column: str, text: str) -> None:
    """Put ``text`` into a JSON column as it is, as a hand-written UPDATE could."""
    database = database_for(app)
    table = database.models.Schedule.__table__  # type: ignore[attr-defined]
    with database.begin() as conn:
        value: Any = literal(text, Text)
        if conn.dialect.name == "postgresql":
            value = cast(value, JSON)  # SQLite would CAST the text to a number
        conn.execute(update(table).where(table.c.name == name).values({column: value}))


def set_options(app: Celery, name: str, options: dict[str, Any]) -> None:
    database = database_for(app)
    table = database.models.Schedule.__table__  # type: ignore[attr-defined]
    with database.begin() as conn:
        conn.execute(update(table).where(table.c.name == name).values(options=options))


HAND_WRITTEN = {
    "deep-args": ("args", DEEP),
    "nested-kwargs": ("kwargs", '{"a": ' + NESTED_100 + "}"),
    "deep-options": ("options", '{"headers": {"x": ' + DEEP + "}}"),
    "deep-schedule": ("schedule", '{"kind": "every", "interval": ' + DEEP + "}"),
}


def test_rows_too_deep_to_decode_are_in_error_and_beat_keeps_firing_the_others(
    app: Celery, clock: FrozenClock, redis_url: str
) -> None:
    store = ScheduleStore(app, clock=clock)
    store.add("healthy", "t.noop", every(60))
    for name, (column, text) in HAND_WRITTEN.items():
        store.add(name, "t.noop", every(60))
        write_json_text(app, name, column, text)
    store.add("bogus-compression", "t.noop", every(60))
    set_options(app, "bogus-compression", {"compression": "bogus"})

    scheduler = Scheduler(app, clock=clock)
    for _ in range(3):
        clock.advance(60)
        scheduler.tick()

    assert sent(redis_url) == {"healthy": 3}
    listed = {s.name: s for s in store.list()}
    assert listed["healthy"].error is None
    for name, (column, _text) in HAND_WRITTEN.items():
        assert f"{column}: JSON nested deeper than 64 levels" in str(listed[name].error), name
    assert "options.compression: 'bogus'" in str(listed["bogus-compression"].error)
    database = database_for(app)
    with database.read() as conn:
        health = {
            h.schedule: h.state
            for h in all_health(conn, database.models, clock(), database.settings)
        }
    assert {state for name, state in health.items() if name != "healthy"} == {"error"}


def test_schedules_and_status_list_a_row_too_deep_to_decode(
    app: Celery, clock: FrozenClock
) -> None:
    store = ScheduleStore(app, clock=clock)
    store.add("healthy", "t.noop", every(60))
    store.add("deep-args", "t.noop", every(60))
    write_json_text(app, "deep-args", "args", DEEP)
    store.add("deep-schedule", "t.noop", every(60))
    write_json_text(app, "deep-schedule", "schedule", "[" + DEEP + "]")

    listing = gaffer_cli(app, "schedules")
    assert listing.exit_code == 0, listing.stderr
    assert "healthy" in listing.stdout
    as_json = gaffer_cli(app, "schedules", "--json")
    assert as_json.exit_code == 0, as_json.stderr
    rows = {row["name"]: row for row in map(json.loads, as_json.stdout.splitlines())}
    assert "args: JSON nested deeper than 64 levels" in rows["deep-args"]["error"]
    assert "schedule: JSON nested deeper than 64 levels" in rows["deep-schedule"]["error"]

    status = gaffer_cli(app, "status")
    assert status.exit_code in (0, 1), status.stderr
    # Once Beat has loaded them, their errors are stored: status reports them as alerts.
    clock.advance(60)
    Scheduler(app, clock=clock).tick()
    status = gaffer_cli(app, "status")
    assert status.exit_code == 1, status.stderr
    lines = {line.split()[0]: line for line in status.stdout.splitlines() if line.strip()}
    assert "error" in lines["deep-schedule"].split()
    assert "error" in lines["deep-args"].split()


@pytest.mark.parametrize(
    ("option", "value"),
    [("--args", DEEP), ("--args", NESTED_100), ("--kwargs", '{"a": ' + DEEP + "}")],
)
def test_the_cli_refuses_deep_json_in_one_line_with_exit_2(
    app: Celery, clock: FrozenClock, option: str, value: str
) -> None:
    result = gaffer_cli(app, "add", "job", "t.noop", "--every", "60", option, value)
    assert result.exit_code == 2
    assert result.stderr.count("\n") == 1
    assert f"{option}" in result.stderr
    assert "JSON nested deeper than 64 levels" in result.stderr
    assert ScheduleStore(app, clock=clock).list() == []
    ScheduleStore(app, clock=clock).add("job", "t.noop", every(60))
    update = gaffer_cli(app, "update", "job", option, value)
    assert update.exit_code == 2
    assert update.stderr.count("\n") == 1
    assert "JSON nested deeper than 64 levels" in update.stderr


def test_a_bogus_compression_is_refused_when_stored_naming_the_field(
    app: Celery, clock: FrozenClock
) -> None:
    store = ScheduleStore(app, clock=clock)
    with pytest.raises(GafferError) as added:
        store.add("job", "t.noop", every(60), options={"compression": "bogus"})
    assert added.value.field == "options.compression"
    store.add("job", "t.noop", every(60), options={"compression": "gzip"})
    with pytest.raises(GafferError) as updated:
        store.update("job", options={"compression": "bogus"})
    assert updated.value.field == "options.compression"
    assert store.get("job").options == {"compression": "gzip"}
    cli = gaffer_cli(
        app, "add", "cli", "t.noop", "--every", "60", "--options", '{"compression": "bogus"}'
    )
    assert cli.exit_code == 2
    assert "options.compression" in cli.stderr
    assert cli.stderr.count("\n") == 1


def test_config_sync_refuses_a_bogus_compression_naming_the_field(
    database_url: str, redis_url: str, clock: FrozenClock
) -> None:
    with noop_app("bounded-sync", database_url, redis_url) as app:
        app.conf.beat_schedule = {
            "configured": {
                "task": "t.noop",
                "schedule": every(60),
                "options": {"compression": "bogus"},
            },
            "fine": {"task": "t.noop", "schedule": every(60)},
        }
        Scheduler(app, clock=clock)
        store = ScheduleStore(app, clock=clock)
        error = str(store.get("configured").error)
        assert "beat_schedule['configured']: options.compression: 'bogus'" in error
        assert store.get("configured").options == {}  # the bad value itself is not stored
        assert store.get("fine").error is None


# -- sends that fail the same way every time --------------------------------------------


def _fire(name: str, clock: FrozenClock) -> Fire:
    nominal = clock()
    key = f"{name}@{nominal:%Y-%m-%dT%H:%M:%SZ}"
    return Fire(1, name, nominal, key, f"id-{name}", "scheduled", 1)


def test_a_send_with_a_compression_kombu_lacks_is_refused_not_retried(
    app: Celery, clock: FrozenClock, redis_url: str
) -> None:
    # A row stored by a process that had the codec, sent by one that has not.
    fires = [_fire("lacking", clock), _fire("fine", clock)]
    payloads = {
        "lacking": Payload("t.noop", [], {}, {"compression": "bogus"}),
        "fine": Payload("t.noop", [], {}, {}),
    }
    with app.producer_or_acquire() as producer:
        outcome = send(app, fires, payloads, producer)
    assert [fire.schedule for fire in outcome.sent] == ["fine"]
    assert set(outcome.refused) == {"lacking"}
    assert "options.compression: 'bogus'" in outcome.refused["lacking"]
    assert sent(redis_url) == {"fine": 1}


def _broken_codec(body: bytes) -> bytes:
    raise KeyError("tenant-dictionary")  # a codec whose own lookup fails, every time


compression.register(_broken_codec, _broken_codec, "application/x-gaffer-broken", ["broken"])


def test_a_send_failing_the_same_way_every_time_puts_its_schedule_in_error(
    app: Celery, clock: FrozenClock, redis_url: str
) -> None:
    store = ScheduleStore(app, clock=clock)
    store.add("fine", "t.noop", every(60))
    store.add("broken", "t.noop", every(60), options={"compression": "broken"})
    scheduler = Scheduler(app, clock=clock)
    for _ in range(3):
        clock.advance(60)
        scheduler.tick()
    assert sent(redis_url) == {"fine": 3}
    error = str(store.get("broken").error)
    assert "the fire cannot be sent" in error
    assert "tenant-dictionary" in error
    assert store.get("fine").error is None
