"""The Beat scheduler in-process, with an injected clock, real databases and real Redis."""

from __future__ import annotations

import itertools
import json
import logging
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from celery import Celery
from sqlalchemy import select, text, update

from celery_gaffer import GafferError, Scheduler, ScheduleStore, cron, every
from celery_gaffer.protocol import fire_key, fire_task_id
from celery_gaffer.store import database_for

from ...support import FrozenClock, empty_redis, message_headers, noop_app


@pytest.fixture
def app(database_url: str, redis_url: str) -> Iterator[Celery]:
    with noop_app(
        "sched-test", database_url, redis_url, gaffer_max_catchup=4, gaffer_republish_after=30
    ) as app:
        yield app


def make_scheduler(app: Celery, clock: FrozenClock) -> Scheduler:
    return Scheduler(app, clock=clock)


def sent_keys(redis_url: str) -> list[str]:
    return [h["gaffer_key"] for h in message_headers(redis_url)]


def ledger(app: Celery) -> list[tuple[str, str, int]]:
    database = database_for(app)
    fire = database.models.Fire
    with database.read() as conn:
        rows = conn.execute(
            select(fire.key, fire.state, fire.publish_count).order_by(fire.nominal_at)
        )
        return [tuple(row) for row in rows]  # type: ignore[misc]


def test_lazy_construction_touches_nothing_and_the_banner_masks_the_password(
    app: Celery, clock: FrozenClock
) -> None:
    from celery_gaffer.settings import forget_settings

    app.conf.gaffer_database_url = "postgresql+psycopg://gaffer:hunter2@127.0.0.1:1/none"
    forget_settings(app)
    scheduler = Scheduler(app, clock=clock, lazy=True)  # nothing listens on port 1
    assert "hunter2" not in scheduler.info
    assert "postgresql+psycopg://gaffer:***@127.0.0.1:1/none" in scheduler.info
    assert scheduler.schedule == {}
    forget_settings(app)


def test_a_fire_is_sent_once_with_its_deterministic_id_and_headers(
    app: Celery, clock: FrozenClock, redis_url: str
) -> None:
    store = ScheduleStore(app, clock=clock)
    store.add("nightly", "t.noop", every(60), args=[1], kwargs={"a": 2}, options={"expires": 3600})
    scheduler = make_scheduler(app, clock)
    assert scheduler.tick() == pytest.approx(60.0 - 0.0, abs=60)
    assert sent_keys(redis_url) == []

    clock.now = datetime(2026, 6, 1, 12, 1, 0, tzinfo=timezone.utc)
    delay = scheduler.tick()
    key = fire_key("nightly", clock.now)
    [headers] = message_headers(redis_url)
    assert headers["gaffer_key"] == key == "nightly@2026-06-01T12:01:00Z"
    assert headers["id"] == fire_task_id(key)
    assert headers["gaffer_schedule"] == "nightly"
    assert headers["gaffer_nominal_at"] == "2026-06-01T12:01:00Z"
    assert headers["celery_beat_task"] is True
    assert headers["task"] == "t.noop"
    assert 0 < delay <= scheduler.max_interval
    assert ledger(app) == [(key, "sent", 1)]

    # A second tick at the same instant (a double tick) and a second Beat send nothing.
    scheduler.tick()
    make_scheduler(app, clock).tick()
    assert sent_keys(redis_url) == [key]


@pytest.mark.parametrize(
    ("catchup", "expected_per_tick"),
    [("latest", [1, 0]), ("all", [4, 4, 2, 0]), ("skip", [0])],
)
def test_catch_up_after_ten_missed_intervals(
    app: Celery, clock: FrozenClock, redis_url: str, catchup: str, expected_per_tick: list[int]
) -> None:
    created = clock.now
    ScheduleStore(app, clock=clock).add("s", "t.noop", every(60), gaffer={"catchup": catchup})
    scheduler = make_scheduler(app, clock)
    clock.advance(10 * 60 + 30)  # Beat was down: ten fires were missed
    per_tick = []
    for _ in expected_per_tick:
        before = len(sent_keys(redis_url))
        scheduler.tick()
        per_tick.append(len(sent_keys(redis_url)) - before)
    assert per_tick == expected_per_tick
    keys = sent_keys(redis_url)
    expected_all = [fire_key("s", created + timedelta(minutes=k)) for k in range(1, 11)]
    if catchup == "all":
        assert keys == expected_all  # oldest first
    elif catchup == "latest":
        assert keys == expected_all[-1:]
    # Afterwards the schedule goes on from now, whatever the policy.
    clock.now = created + timedelta(minutes=11)
    scheduler.tick()
    assert sent_keys(redis_url)[-1] == fire_key("s", created + timedelta(minutes=11))


def test_starting_deadline_records_missed_fires(
    app: Celery, clock: FrozenClock, redis_url: str
) -> None:
    ScheduleStore(app, clock=clock).add(
        "s", "t.noop", every(60), gaffer={"catchup": "all", "starting_deadline": 150}
    )
    scheduler = make_scheduler(app, clock)
    clock.advance(5 * 60 + 10)
    scheduler.tick()  # at most gaffer_max_catchup (4) fires a tick
    scheduler.tick()
    states = Counter(state for _key, state, _count in ledger(app))
    # Fires at +1..+5 min; at +5:10 those older than 150 s (+1, +2) are missed.
    assert states == {"missed": 2, "sent": 3}
    assert len(sent_keys(redis_url)) == 3
    database = database_for(app)
    runs = database.models.JobRun
    with database.read() as conn:
        missed = conn.execute(
            select(
                runs.state, runs.key, runs.task_id, runs.nominal_at, runs.error_message
            ).order_by(runs.nominal_at)
        ).all()
    first = datetime(2026, 6, 1, 12, 1, tzinfo=timezone.utc)
    assert [tuple(row) for row in missed] == [
        (
            "missed",
            fire_key("s", nominal),
            fire_task_id(fire_key("s", nominal)),
            nominal,
            f"never sent: Beat reached it {late}s late, past its starting deadline of 150s",
        )
        for nominal, late in ((first, 250), (first + timedelta(minutes=1), 190))
    ]


def test_a_committed_fire_whose_publish_failed_is_published_once_after_republish_after(
    app: Celery, clock: FrozenClock, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    ScheduleStore(app, clock=clock).add("s", "t.noop", every(3600))
    scheduler = make_scheduler(app, clock)
    real_send = app.send_task
    calls = []

    def broken_send(*args: Any, **kwargs: Any) -> Any:
        calls.append(kwargs["task_id"])
        raise ConnectionError("broker went away between commit and publish")

    monkeypatch.setattr(app, "send_task", broken_send)
    clock.advance(3600)
    scheduler.tick()
    assert len(calls) == 1
    assert sent_keys(redis_url) == []
    [(key, state, count)] = ledger(app)
    assert (state, count) == ("pending", 1)

    monkeypatch.setattr(app, "send_task", real_send)
    clock.advance(29)
    scheduler.tick()
    assert sent_keys(redis_url) == []  # not yet: gaffer_republish_after is 30 s
    clock.advance(2)
    scheduler.tick()
    other_beat = make_scheduler(app, clock)
    other_beat.tick()
    scheduler.tick()
    assert sent_keys(redis_url) == [key]
    assert ledger(app) == [(key, "sent", 2)]


def test_a_failed_publish_batch_leaves_its_fires_pending_and_they_are_republished_once(
    app: Celery, clock: FrozenClock, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kombu import Producer

    if not hasattr(Producer, "batch"):  # kombu < 5.7: Beat sends one message at a time
        pytest.skip("this kombu has no publish batches (Producer.batch is kombu >= 5.7)")
    from kombu.exceptions import BatchPublishError
    from kombu.transport.redis import PublishBatch

    from celery_gaffer.beat.publisher import PUBLISH_BATCH

    count = PUBLISH_BATCH + 20  # two broker batches: the first flushes, the second fails
    ScheduleStore(app, clock=clock).add_many(
        [{"name": f"s{i:04d}", "task": "t.noop", "schedule": every(3600)} for i in range(count)]
    )
    scheduler = make_scheduler(app, clock)
    real_flush = PublishBatch.flush
    flushes = []

    def flaky_flush(self: PublishBatch) -> None:
        flushes.append(self._buffered)
        if len(flushes) == 2:
            self.discard()
            raise BatchPublishError("Redis publish batch failed; delivery is uncertain")
        real_flush(self)

    monkeypatch.setattr(PublishBatch, "flush", flaky_flush)
    clock.advance(3600)
    scheduler.tick()
    assert flushes[:2] == [PUBLISH_BATCH, 20]
    first = sent_keys(redis_url)
    assert len(first) == PUBLISH_BATCH
    states = Counter((state, n) for _key, state, n in ledger(app))
    assert states == {("sent", 1): PUBLISH_BATCH, ("pending", 1): 20}

    monkeypatch.setattr(PublishBatch, "flush", real_flush)
    clock.advance(31)
    scheduler.tick()
    keys = sent_keys(redis_url)
    assert len(keys) == count == len(set(keys))
    assert Counter((state, n) for _key, state, n in ledger(app)) == {
        ("sent", 1): PUBLISH_BATCH,
        ("sent", 2): 20,
    }


def test_jitter_delays_the_send_but_not_the_nominal_time(
    app: Celery, clock: FrozenClock, redis_url: str
) -> None:
    ScheduleStore(app, clock=clock).add("j", "t.noop", every(600, jitter=300))
    scheduler = make_scheduler(app, clock)
    clock.advance(600)
    scheduler.tick()
    [(key, state, _)] = ledger(app)
    schedule = every(600, jitter=300)
    nominal = datetime(2026, 6, 1, 12, 10, tzinfo=timezone.utc)
    send_at = schedule.send_at(key, nominal)
    assert nominal < send_at < nominal + timedelta(seconds=300)
    assert state == "pending"
    assert sent_keys(redis_url) == []
    clock.now = send_at
    scheduler.tick()
    assert sent_keys(redis_url) == [key] == [fire_key("j", nominal)]


def test_unusable_rows_are_marked_in_error_and_others_keep_firing(
    app: Celery, clock: FrozenClock, redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    store = ScheduleStore(app, clock=clock)
    for name in ("good", "bad-zone", "bad-task", "bad-args"):
        store.add(name, "t.noop", cron("* * * * *"))
    database = database_for(app)
    table = database.models.Schedule.__table__  # type: ignore[attr-defined]
    with database.begin() as conn:
        conn.execute(
            update(table)
            .where(table.c.name == "bad-zone")
            .values(
                schedule={"kind": "cron", "expr": "* * * * *", "tz": "Mars/Olympus", "jitter": 0}
            )
        )
        conn.execute(update(table).where(table.c.name == "bad-task").values(task="t.missing"))
        if conn.dialect.name == "sqlite":
            conn.execute(text("UPDATE gaffer_schedules SET args = '[1, 2' WHERE name = 'bad-args'"))
        else:
            conn.execute(
                text("""UPDATE gaffer_schedules SET args = '"text"' WHERE name = 'bad-args'""")
            )
    scheduler = make_scheduler(app, clock)
    with caplog.at_level(logging.ERROR, logger="celery_gaffer"):
        for _ in range(3):
            clock.advance(60)
            scheduler.tick()
    assert Counter(h["gaffer_schedule"] for h in message_headers(redis_url)) == {"good": 3}
    errors = [r for r in caplog.records if getattr(r, "action", None) == "schedule_error"]
    assert sorted(r.schedule for r in errors) == ["bad-args", "bad-task", "bad-zone"]  # type: ignore[attr-defined]
    listed = {s.name: s for s in store.list()}
    assert listed["good"].error is None
    assert "Mars/Olympus" in (listed["bad-zone"].error or "")
    assert "t.missing" in (listed["bad-task"].error or "")
    assert listed["bad-args"].error


def test_edits_are_picked_up_on_the_next_tick(
    app: Celery, clock: FrozenClock, redis_url: str
) -> None:
    store = ScheduleStore(app, clock=clock)
    scheduler = make_scheduler(app, clock)
    store.add("e", "t.noop", every(60))
    clock.advance(60)
    scheduler.tick()
    store.update("e", schedule=every(10))
    clock.advance(10)
    scheduler.tick()
    store.pause("e")
    clock.advance(30)
    scheduler.tick()
    store.resume("e")
    clock.advance(10)
    scheduler.tick()
    store.remove("e")
    clock.advance(10)
    scheduler.tick()
    nominal = [h["gaffer_nominal_at"] for h in message_headers(redis_url)]
    assert nominal == ["2026-06-01T12:01:00Z", "2026-06-01T12:01:10Z", "2026-06-01T12:01:50Z"]


def test_config_entries_are_synced_and_db_entries_left_alone(
    app: Celery, clock: FrozenClock, redis_url: str
) -> None:
    ScheduleStore(app, clock=clock).add("from-db", "t.noop", every(60))
    app.conf.beat_schedule = {
        "from-config": {"task": "t.noop", "schedule": 30.0},
        "from-db": {"task": "t.noop", "schedule": every(5)},
    }
    make_scheduler(app, clock)
    listed = {s.name: s for s in ScheduleStore(app).list()}
    assert listed["from-config"].source == "config"
    assert listed["from-config"].schedule == every(30)
    assert listed["from-db"].source == "db"
    assert listed["from-db"].schedule == every(60)
    app.conf.beat_schedule = {}
    make_scheduler(app, clock)
    assert {s.name for s in ScheduleStore(app).list()} == {"from-db"}


def test_a_bad_beat_schedule_entry_is_in_error_and_the_others_keep_firing(
    app: Celery, clock: FrozenClock, redis_url: str
) -> None:
    from celery.schedules import crontab

    app.conf.beat_schedule = {
        "old": {"task": "t.noop", "schedule": crontab(minute="*/5")},
        "typo": {"task": "t.nope", "schedule": every(60)},
        "good": {"task": "t.noop", "schedule": every(60)},
    }
    scheduler = make_scheduler(app, clock)  # starts: one bad entry never stops Beat
    listed = {s.name: s for s in ScheduleStore(app).list()}
    assert "use cron(\"*/5 * * * *\") instead of crontab(minute='*/5')" in str(listed["old"].error)
    assert "'t.nope' is not a task registered" in str(listed["typo"].error)
    assert listed["good"].error is None
    clock.advance(60)
    scheduler.tick()
    assert sent_keys(redis_url) == [fire_key("good", clock.now)]
    app.conf.beat_schedule = {"good": {"task": "t.noop", "schedule": every(60)}}
    make_scheduler(app, clock)
    assert {s.name for s in ScheduleStore(app).list()} == {"good"}


def test_trigger_sends_one_manual_fire_with_its_own_key(
    app: Celery, clock: FrozenClock, redis_url: str
) -> None:
    store = ScheduleStore(app, clock=clock)
    store.add("t", "t.noop", every(3600), args=["x"])
    first = store.trigger("t")
    second = store.trigger("t")
    assert first == fire_key("t", clock.now)
    assert second != first
    assert sent_keys(redis_url) == [first, second]
    assert [h["id"] for h in message_headers(redis_url)] == [
        fire_task_id(first),
        fire_task_id(second),
    ]


def test_a_tick_reads_the_due_rows_json_as_stored_text(app: Celery, clock: FrozenClock) -> None:
    # As text on both databases (psycopg would decode PostgreSQL's json): the tick
    # decodes only the texts its cache has not seen.
    from celery_gaffer.store.schedules import claim_due_schedules

    ScheduleStore(app, clock=clock).add(
        "t1", "t.noop", every(60), args=[1, "two"], kwargs={"b": [3], "a": None},
        options={"priority": 5},
    )  # fmt: skip
    database = database_for(app)
    with database.begin() as conn:
        (row,) = claim_due_schedules(conn, database.models, clock.advance(60), 10)
    stored = (row.schedule, row.args, row.kwargs, row.options)
    assert all(isinstance(value, str) for value in stored), stored
    assert [json.loads(value) for value in stored[1:]] == [
        [1, "two"], {"b": [3], "a": None}, {"priority": 5},
    ]  # fmt: skip
    assert json.loads(row.schedule)["interval"] == 60


def test_backfill_sends_past_fires_once(app: Celery, clock: FrozenClock, redis_url: str) -> None:
    store = ScheduleStore(app, clock=clock)
    store.add("b", "t.noop", every(3600))
    start = clock.now - timedelta(hours=5)
    report = store.backfill("b", start, clock.now - timedelta(hours=2))
    assert (report.sent, report.already) == (3, 0)
    report = store.backfill("b", start, clock.now)
    assert (report.sent, report.already) == (2, 3)
    nominal = [h["gaffer_nominal_at"] for h in message_headers(redis_url)]
    assert nominal == [f"2026-06-01T{h:02d}:00:00Z" for h in (8, 9, 10, 11, 12)]
    with pytest.raises(GafferError, match="past"):
        store.backfill("b", start, clock.now + timedelta(hours=1))


def test_cleanup_deletes_only_what_is_past_retention(app: Celery, clock: FrozenClock) -> None:
    from celery_gaffer.store.retention import cleanup

    store = ScheduleStore(app, clock=clock)
    store.add("c", "t.noop", every(60))
    scheduler = make_scheduler(app, clock)
    for _ in range(3):
        clock.advance(60)
        scheduler.tick()
    database = database_for(app)
    assert cleanup(database, clock.now).fires == 0
    report = cleanup(database, clock.now + timedelta(days=30) - timedelta(seconds=30))
    assert report.fires == 2  # the ledger rows older than 30 days; the newest stays
    assert len(ledger(app)) == 1


def start_run(app: Celery, key: str, clock: FrozenClock, state: str = "running") -> None:
    """What a worker's task_prerun writes when it starts the fire ``key`` (``lost``: and
    what Beat writes once that worker died with it)."""
    database = database_for(app)
    runs = database.models.JobRun.__table__  # type: ignore[attr-defined]
    with database.begin() as conn:
        conn.execute(
            runs.insert().values(
                task_id=fire_task_id(key),
                task_name="t.noop",
                state=state,
                attempt=1,
                updated_at=clock.now,
            )
        )


def two_fires_sent(
    app: Celery, clock: FrozenClock, redis_url: str, watched: str, other: str
) -> tuple[ScheduleStore, Scheduler, str]:
    """Two hourly schedules whose first fires are sent at once; the key of ``watched``'s."""
    store = ScheduleStore(app, clock=clock)
    store.add(watched, "t.noop", every(3600))
    store.add(other, "t.noop", every(3600))
    scheduler = make_scheduler(app, clock)
    clock.advance(3600)
    scheduler.tick()
    [key] = [k for k in sent_keys(redis_url) if k.startswith(watched + "@")]
    return store, scheduler, key


@pytest.fixture
def confirming(app: Celery) -> Iterator[Celery]:
    from celery_gaffer.settings import forget_settings

    app.conf.gaffer_confirm_delivery_after = 20
    forget_settings(app)
    yield app
    forget_settings(app)


def test_delivery_confirmation_republishes_a_fire_the_broker_lost_once_it_was_overtaken(
    confirming: Celery, clock: FrozenClock, redis_url: str
) -> None:
    app = confirming
    store = ScheduleStore(app, clock=clock)
    store.add("c", "t.noop", every(3600))
    store.add("d", "t.noop", every(3600))
    scheduler = make_scheduler(app, clock)
    clock.advance(3600)
    scheduler.tick()
    first = sorted(sent_keys(redis_url))
    assert len(first) == 2
    empty_redis(redis_url)  # the broker restarted, empty
    clock.advance(21)
    scheduler.tick()
    # No fire started since: the workers may be behind, so nothing is sent again.
    assert sent_keys(redis_url) == []
    trigger_key = store.trigger("d")  # a later fire of the same task, which a worker starts
    assert sent_keys(redis_url) == [trigger_key]
    start_run(app, trigger_key, clock)
    clock.advance(21)
    scheduler.tick()
    assert sorted(k for k in sent_keys(redis_url) if k in first) == first  # published again
    c_key = next(k for k in first if k.startswith("c@"))
    start_run(app, c_key, clock)
    clock.advance(21)
    scheduler.tick()
    states = {key: (state, count) for key, state, count in ledger(app)}
    assert states[c_key] == ("delivered", 2)


def test_a_backlog_is_not_flooded_with_copies_and_no_fire_is_given_up(
    confirming: Celery, clock: FrozenClock, redis_url: str
) -> None:
    """Workers far behind (no fire started for minutes): each fire is sent once."""
    app = confirming
    ScheduleStore(app, clock=clock).add("b", "t.noop", every(10))
    scheduler = make_scheduler(app, clock)
    for _ in range(30):
        clock.advance(10)
        scheduler.tick()
    keys = sent_keys(redis_url)
    assert len(keys) == len(set(keys)) == 30
    assert {state for _key, state, _count in ledger(app)} == {"sent"}


def test_a_fire_the_broker_keeps_losing_is_published_again_each_time_later_each_time(
    confirming: Celery, clock: FrozenClock, redis_url: str
) -> None:
    from celery_gaffer.scheduler import MAX_PUBLISHES

    app = confirming
    store, scheduler, u_key = two_fires_sent(app, clock, redis_url, "u", "v")
    sends = [clock.now]
    for _ in range(MAX_PUBLISHES + 2):  # never started, never given up
        clock.advance(1)
        start_run(app, store.trigger("v"), clock)  # a later fire starts: u was lost
        for _second in range(200):
            clock.advance(1)
            before = sent_keys(redis_url).count(u_key)
            scheduler.tick()
            if sent_keys(redis_url).count(u_key) > before:
                sends.append(clock.now)
                break
    gaps = [(b - a).total_seconds() for a, b in itertools.pairwise(sends)]
    assert gaps == [20, 20, 40, 80, 160, 160]  # 20 s, doubled, at most 8 times
    states = {key: (state, count) for key, state, count in ledger(app)}
    assert states[u_key] == ("sent", MAX_PUBLISHES + 3)


def test_a_fire_whose_runs_die_with_their_workers_is_given_up_after_every_send(
    confirming: Celery, clock: FrozenClock, redis_url: str
) -> None:
    from celery_gaffer.scheduler import MAX_PUBLISHES

    app = confirming
    store, scheduler, p_key = two_fires_sent(app, clock, redis_url, "p", "q")
    for _ in range(MAX_PUBLISHES):
        start_run(app, p_key, clock, state="lost")  # it reached a worker, which died with it
        clock.advance(1)
        start_run(app, store.trigger("q"), clock)  # later fires keep starting
        clock.advance(200)
        scheduler.tick()
    states = {key: (state, count) for key, state, count in ledger(app)}
    assert states[p_key] == ("unconfirmed", MAX_PUBLISHES)  # sent 4 times, died 4 times
    assert sent_keys(redis_url).count(p_key) == MAX_PUBLISHES


def test_a_fire_whose_run_ended_retrying_is_published_again_when_the_retry_is_lost(
    confirming: Celery, clock: FrozenClock, redis_url: str
) -> None:
    """Its first run started (delivered), failed and asked for a retry in 30 s; the retry
    message was lost (a Redis restart). The ``retrying`` record must not count as proof
    of delivery: once the retry's ETA and ``confirm_after`` passed and a later fire
    started, the fire is published again; not before."""
    import time_machine
    from celery import states
    from celery.exceptions import Retry

    from celery_gaffer.runs.delivery import Delivery
    from celery_gaffer.runs.recorder import Recorder

    app = confirming
    store, scheduler, r_key = two_fires_sent(app, clock, redis_url, "r", "s")
    start_run(app, r_key, clock)
    clock.advance(21)
    scheduler.tick()
    assert {key: state for key, state, _count in ledger(app)}[r_key] == "delivered"
    database = database_for(app)
    runs = database.models.JobRun.__table__  # type: ignore[attr-defined]
    with database.begin() as conn:
        row_id = conn.execute(
            select(runs.c.id).where(runs.c.task_id == fire_task_id(r_key))
        ).scalar_one()
    request = type("Request", (), {"gaffer_key": r_key, "gaffer_schedule": "r", "hostname": "w"})()
    Delivery.of(request).row_id = row_id  # as task_prerun left it
    task = type("Task", (), {"app": app, "request": request, "name": "t.noop"})()
    recorder = Recorder(app)
    with time_machine.travel(clock.now, tick=False):
        recorder.retry(sender=task, reason=Retry(exc=RuntimeError("db restarted"), when=30))
        recorder.postrun(sender=task, task_id=fire_task_id(r_key), state=states.RETRY)
    assert {key: state for key, state, _count in ledger(app)}[r_key] == "sent"
    redis_client_flush(redis_url)  # the retry message is lost
    clock.advance(1)
    start_run(app, store.trigger("s"), clock)  # a later fire starts: r was overtaken...
    clock.advance(40)
    scheduler.tick()
    assert r_key not in sent_keys(redis_url)  # ...but its retry may still be waiting
    clock.advance(11)  # 30 s ETA + 20 s confirm_after since the retry
    scheduler.tick()
    assert sent_keys(redis_url).count(r_key) == 1
    states_ = {key: (state, count) for key, state, count in ledger(app)}
    assert states_[r_key] == ("sent", 2)


def redis_client_flush(redis_url: str) -> None:
    empty_redis(redis_url)


@contextmanager
def advance_refused(app: Celery, database_url: str) -> Iterator[None]:
    """While inside, any UPDATE of a schedule's ``next_fire_at`` fails (a trigger)."""
    database = database_for(app)
    if database_url.startswith("postgresql"):
        create = [
            "CREATE OR REPLACE FUNCTION gaffer_test_refuse() RETURNS trigger"
            " LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'advance refused'; END $$",
            "CREATE TRIGGER gaffer_test_refuse BEFORE UPDATE OF next_fire_at"
            " ON gaffer_schedules FOR EACH ROW EXECUTE FUNCTION gaffer_test_refuse()",
        ]
        drop = [
            "DROP TRIGGER gaffer_test_refuse ON gaffer_schedules",
            "DROP FUNCTION gaffer_test_refuse()",
        ]
    else:
        create = [
            "CREATE TRIGGER gaffer_test_refuse BEFORE UPDATE OF next_fire_at"
            " ON gaffer_schedules BEGIN SELECT RAISE(ABORT, 'advance refused'); END"
        ]
        drop = ["DROP TRIGGER gaffer_test_refuse"]
    with database.begin() as conn:
        for statement in create:
            conn.execute(text(statement))
    try:
        yield
    finally:
        with database.begin() as conn:
            for statement in drop:
                conn.execute(text(statement))


def test_a_dispatch_whose_commit_fails_sends_nothing_and_each_fire_once_after(
    app: Celery,
    clock: FrozenClock,
    redis_url: str,
    database_url: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # The schedules' UPDATE and the COMMIT run while the first publish batch is built:
    # when they fail, that batch must never reach the broker.
    names = [f"s{i}" for i in range(3)]
    ScheduleStore(app, clock=clock).add_many(
        [{"name": name, "task": "t.noop", "schedule": every(3600)} for name in names]
    )
    scheduler = make_scheduler(app, clock)
    clock.advance(3600)
    with advance_refused(app, database_url), caplog.at_level(logging.ERROR, "celery_gaffer"):
        scheduler.tick()
    assert "advance refused" in caplog.text  # the tick failed (one line), Beat goes on
    assert sent_keys(redis_url) == []
    assert ledger(app) == []  # the fires' insert rolled back with the UPDATE

    scheduler.tick()
    scheduler.tick()
    keys = [fire_key(name, clock.now) for name in names]
    assert sorted(sent_keys(redis_url)) == keys
    assert ledger(app) == [(key, "sent", 1) for key in keys]


def test_a_held_fire_whose_commit_failed_is_never_sent(
    app: Celery, clock: FrozenClock, redis_url: str, database_url: str
) -> None:
    # A jittered fire due within a second is held for its send time: it may be handed to
    # the sending side only once its commit is known.
    ScheduleStore(app, clock=clock).add("j", "t.noop", every(600, jitter=1))
    scheduler = make_scheduler(app, clock)
    nominal = clock.advance(600)
    with advance_refused(app, database_url):
        scheduler.tick()  # fails (one line logged)
        clock.advance(2)  # past the held fire's send time
        scheduler.tick()  # fails again; a fire held by the first would go out now
    assert sent_keys(redis_url) == []
    assert ledger(app) == []

    scheduler.tick()
    clock.advance(2)
    scheduler.tick()
    assert sent_keys(redis_url) == [fire_key("j", nominal)]
