"""One bad schedule never stops Beat: poisoned rows, errors that clear, refused sends, bounds.

Real SQLite and PostgreSQL, real Redis; Beat in-process with an injected clock.
"""

from __future__ import annotations

import json
import signal
from collections import Counter
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from celery import Celery
from sqlalchemy import func, select, update

from celery_gaffer import GafferError, InvalidInput, Scheduler, ScheduleStore, cron, every
from celery_gaffer.beat.health import all_health
from celery_gaffer.beat.rows import ERROR_RECHECK
from celery_gaffer.protocol import fire_key
from celery_gaffer.store import database_for

from ...support import FrozenClock, message_headers, noop_app


@pytest.fixture
def app(database_url: str, redis_url: str) -> Iterator[Celery]:
    with noop_app("isolation-test", database_url, redis_url) as app:
        yield app


def sent(redis_url: str) -> Counter[str]:
    return Counter(h["gaffer_schedule"] for h in message_headers(redis_url))


def poison(app: Celery, name: str, **values: Any) -> None:
    """Change a schedule's row behind the API, as a hand-written UPDATE or an older
    version could."""
    database = database_for(app)
    table = database.models.Schedule.__table__  # type: ignore[attr-defined]
    with database.begin() as conn:
        conn.execute(update(table).where(table.c.name == name).values(**values))


POISONS: dict[str, dict[str, Any]] = {
    "bogus-catchup": {"catchup": "bogus"},
    "bogus-overlap": {"overlap": "whatever"},
    "huge-grace": {"grace": 1e300},
    "huge-deadline": {"starting_deadline": 1e300, "catchup": "all"},
    "task-id-option": {"options": {"task_id": "fixed"}},
    "pickle-option": {"options": {"serializer": "pickle"}},
    "string-headers": {"options": {"headers": "zzz"}},
    "args-option": {"options": {"args": [1]}},
    "huge-jitter": {"schedule": {"kind": "every", "interval": 60, "jitter": 1e300}},
}


def test_poisoned_rows_go_to_error_with_their_reason_and_the_healthy_one_keeps_firing(
    app: Celery, clock: FrozenClock, redis_url: str
) -> None:
    store = ScheduleStore(app, clock=clock)
    store.add("healthy", "t.noop", every(60))
    for name, values in POISONS.items():
        store.add(name, "t.noop", every(60))
        poison(app, name, **values)
    scheduler = Scheduler(app, clock=clock)
    for _ in range(3):
        clock.advance(60)
        scheduler.tick()
    assert sent(redis_url) == {"healthy": 3}
    listed = {s.name: s for s in store.list()}
    assert listed["healthy"].error is None
    for name, field in [
        ("bogus-catchup", "gaffer.catchup"),
        ("bogus-overlap", "gaffer.overlap"),
        ("huge-grace", "gaffer.grace"),
        ("huge-deadline", "gaffer.starting_deadline"),
        ("task-id-option", "options.task_id"),
        ("pickle-option", "options.serializer"),
        ("string-headers", "options.headers"),
        ("args-option", "options.args"),
        ("huge-jitter", "jitter"),
    ]:
        assert field in str(listed[name].error), (name, listed[name].error)
    database = database_for(app)
    with database.read() as conn:
        health = {
            h.schedule: h for h in all_health(conn, database.models, clock(), database.settings)
        }
    assert health["healthy"].state == "late"  # no worker runs its fires: not in error
    assert {h.state for name, h in health.items() if name != "healthy"} == {"error"}
    assert all(h.alerting and h.reason for name, h in health.items() if name != "healthy")


def test_an_error_clears_when_its_cause_is_gone(
    app: Celery, clock: FrozenClock, redis_url: str
) -> None:
    store = ScheduleStore(app, clock=clock, check_tasks=False)
    store.add("later", "t.later", every(60))  # the task is not registered (yet)
    scheduler = Scheduler(app, clock=clock)
    clock.advance(60)
    scheduler.tick()
    assert "'t.later' is not registered" in str(store.get("later").error)
    with pytest.raises(InvalidInput, match="still in error"):
        ScheduleStore(app, clock=clock).resume("later")  # the cause is still there

    @app.task(name="t.later", shared=False)
    def later() -> None:
        return None

    clock.advance(ERROR_RECHECK.total_seconds())
    scheduler.tick()  # loaded again: usable now, the error clears and the fire goes out
    assert store.get("later").error is None
    assert sent(redis_url) == {"later": 1}


def test_resume_clears_an_error_whose_cause_is_gone(app: Celery, clock: FrozenClock) -> None:
    store = ScheduleStore(app, clock=clock)
    store.add("r", "t.noop", every(60))
    poison(app, "r", error="task: 't.noop' is not registered with this Beat's app")
    resumed = store.resume("r")
    assert resumed.error is None
    assert resumed.next_fire_at == clock() + timedelta(seconds=60)


def test_a_fire_whose_send_fails_puts_only_its_schedule_in_error(
    app: Celery, clock: FrozenClock, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = ScheduleStore(app, clock=clock)
    store.add("fine", "t.noop", every(60))
    store.add("cursed", "t.noop", every(60), kwargs={"curse": True})
    real = app.send_task

    def send_task(name: str, *args: Any, **kwargs: Any) -> Any:
        if kwargs.get("kwargs", {}).get("curse"):
            raise TypeError("cannot serialise this payload")
        return real(name, *args, **kwargs)

    monkeypatch.setattr(app, "send_task", send_task)
    scheduler = Scheduler(app, clock=clock)
    for _ in range(2):
        clock.advance(60)
        scheduler.tick()
    assert sent(redis_url) == {"fine": 2}
    assert "cannot serialise this payload" in str(store.get("cursed").error)
    database = database_for(app)
    fires = database.models.Fire
    with database.read() as conn:
        pending = conn.execute(
            select(func.count()).where(fires.schedule == "cursed", fires.state == "pending")
        ).scalar()
    # Not retried by itself (each try would add a fire the broker refuses again): its
    # one fire waits, pending, for the error to clear.
    assert pending == 1
    monkeypatch.setattr(app, "send_task", real)  # the cause is fixed...
    assert store.resume("cursed").error is None  # ...and resuming checks it again
    clock.advance(60)
    scheduler.tick()
    assert sent(redis_url)["cursed"] == 2  # the waiting fire and the new one
    assert store.get("fine").error is None


@pytest.mark.parametrize(
    ("arguments", "field"),
    [
        ({"gaffer": {"grace": 1e300}}, "gaffer.grace"),
        ({"gaffer": {"grace": 3e11}}, "gaffer.grace"),
        ({"gaffer": {"starting_deadline": 1e300}}, "gaffer.starting_deadline"),
        ({"options": {"task_id": "fixed"}}, "options.task_id"),
        ({"options": {"serializer": "pickle"}}, "options.serializer"),
        ({"options": {"headers": "zzz"}}, "options.headers"),
        ({"options": {"headers": {"gaffer_key": "x"}}}, "options.headers"),
        ({"options": {"priority": 900}}, "options.priority"),
        ({"args": ["x" * 70_000]}, "args"),
        ({"kwargs": {"nul": "a\x00b"}}, "kwargs"),
        ({"name": "two\nlines"}, "name"),
        ({"name": "nul\x00"}, "name"),
        ({"name": "lone \udc80 surrogate"}, "name"),
        ({"schedule": "too long"}, "expr"),
    ],
)
def test_bad_input_is_refused_naming_its_field_and_nothing_is_written(
    app: Celery, clock: FrozenClock, arguments: dict[str, Any], field: str
) -> None:
    store = ScheduleStore(app, clock=clock)
    entry: dict[str, Any] = {"name": "x", "task": "t.noop", "schedule": every(60), **arguments}
    if entry["schedule"] == "too long":
        with pytest.raises(GafferError) as info:
            cron("* * * * *" + " " * 300)
    else:
        with pytest.raises(GafferError) as info:
            store.add(**entry)
    assert info.value.field == field
    assert store.list() == []


def test_a_stored_option_reaches_the_message(
    app: Celery, clock: FrozenClock, redis_url: str
) -> None:
    store = ScheduleStore(app, clock=clock)
    store.add("h", "t.noop", every(60), options={"headers": {"team": "billing"}, "expires": 60})
    scheduler = Scheduler(app, clock=clock)
    clock.advance(60)
    scheduler.tick()
    [headers] = message_headers(redis_url)
    assert headers["team"] == "billing"
    assert headers["gaffer_key"] == fire_key("h", clock())
    assert json.loads(json.dumps(store.get("h").options)) == {
        "headers": {"team": "billing"},
        "expires": 60.0,
    }


def test_a_paused_schedule_stays_paused_through_a_bad_config_sync(
    app: Celery, clock: FrozenClock, redis_url: str
) -> None:
    app.conf.beat_schedule = {"nightly": {"task": "t.noop", "schedule": every(60)}}
    Scheduler(app, clock=clock)
    ScheduleStore(app, clock=clock).pause("nightly")
    app.conf.beat_schedule = {"nightly": {"task": "t.gone", "schedule": every(60)}}
    Scheduler(app, clock=clock)  # a Beat whose code lacks the task
    stored = ScheduleStore(app, clock=clock).get("nightly")
    assert "t.gone" in str(stored.error)
    assert not stored.enabled
    assert stored.next_fire_at is None


def test_a_row_whose_health_cannot_be_evaluated_is_in_error_and_beat_goes_on(
    app: Celery, clock: FrozenClock, redis_url: str
) -> None:
    store = ScheduleStore(app, clock=clock)
    store.add("healthy", "t.noop", every(60))
    store.add("ancient", "t.noop", every(60))
    poison(app, "ancient", grace=1e11)  # accepted by versions before the one-year bound
    database = database_for(app)
    with database.read() as conn:  # what `gaffer status` and Beat's health check read
        listed = all_health(conn, database.models, clock(), database.settings)
    health = {h.schedule: h for h in listed}
    assert health["ancient"].state == "error"
    assert "health: OverflowError" in str(health["ancient"].error)
    assert health["healthy"].state == "ok"
    scheduler = Scheduler(app, clock=clock)
    for _ in range(2):
        clock.advance(60)
        scheduler.tick()
    assert sent(redis_url) == {"healthy": 2}


@pytest.mark.postgres
def test_beat_does_not_wait_out_a_mistake(postgres_url: str) -> None:
    """A missing database or a wrong role is a mistake to fix: Beat stops at once with
    one line, where a refused connection (an outage) is waited for."""
    from sqlalchemy.engine import make_url

    naps: list[float] = []
    handlers = {signum: signal.getsignal(signum) for signum in (signal.SIGTERM, signal.SIGINT)}
    for url in (
        make_url(postgres_url).set(database="no_such_database_here"),
        make_url(postgres_url).set(username="no_such_role_here"),
    ):
        app = Celery("mistake", broker="memory://", set_as_current=False)
        app.conf.gaffer_database_url = url.render_as_string(hide_password=False)
        with pytest.raises(SystemExit) as info:  # Beat's exit status 2, one line logged
            Scheduler(app, sleep=naps.append)
        assert info.value.code == 2
        assert isinstance(info.value.__cause__, GafferError)
        assert "does not exist" in str(info.value.__cause__)
        app.close()
    for signum, handler in handlers.items():  # a Beat that gave up left its own
        signal.signal(signum, handler)
    assert naps == []
    outage = Celery("outage", broker="memory://", set_as_current=False)
    outage.conf.gaffer_database_url = "postgresql+psycopg://postgres@127.0.0.1:1/x"

    def give_up(seconds: float) -> None:
        naps.append(seconds)
        if len(naps) == 3:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        Scheduler(outage, sleep=give_up)
    assert naps == [1.0, 2.0, 4.0]
    outage.close()
