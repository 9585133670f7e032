"""The audit log written by ScheduleStore, the config sync and the importers, against
real SQLite files and PostgreSQL: one entry per change, in the change's transaction."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import timedelta

import pytest
from celery import Celery

from celery_gaffer import ScheduleStore, cron, every
from celery_gaffer.exceptions import InvalidInput, ScheduleExists, ScheduleNotFound
from celery_gaffer.importers.beat_schedule import import_beat_schedule
from celery_gaffer.store import schedules as rows
from celery_gaffer.store.audit import AuditEntry, default_actor

from ..support import FrozenClock, noop_app


@pytest.fixture
def app(database_url: str, redis_url: str) -> Iterator[Celery]:
    with noop_app("audit-test", database_url, redis_url) as app:
        yield app


@pytest.fixture
def store(app: Celery, clock: FrozenClock) -> ScheduleStore:
    return ScheduleStore(app, clock=clock, actor="alice", audit_source="api")


def only(entries: list[AuditEntry]) -> AuditEntry:
    assert len(entries) == 1, [entry.as_json() for entry in entries]
    return entries[0]


def test_add_records_who_added_what_through_what(store: ScheduleStore, clock: FrozenClock) -> None:
    store.add("report", "t.noop", cron("0 9 * * *", "Europe/Paris"))
    entry = only(store.audit("report"))
    assert entry.as_json() == {
        "at": clock.now.isoformat(),
        "actor": "alice",
        "source": "api",
        "action": "add",
        "schedule": "report",
        "note": None,
        "changes": {
            "name": [None, "report"],
            "task": [None, "t.noop"],
            "schedule": [None, cron("0 9 * * *", "Europe/Paris").to_dict()],
        },
    }


def test_the_default_actor_is_the_os_user_through_code(app: Celery) -> None:
    store = ScheduleStore(app)
    store.add("a", "t.noop", every(60))
    entry = only(store.audit())
    assert (entry.actor, entry.source) == (default_actor(), "code")


def test_acting_as_records_another_actor_on_the_same_database(store: ScheduleStore) -> None:
    store.add("a", "t.noop", every(60))
    store.acting_as("deploy-bot", "console").pause("a")
    newest = store.audit("a")[0]
    assert (newest.actor, newest.source, newest.action) == ("deploy-bot", "console", "pause")
    with pytest.raises(InvalidInput, match="audit_source"):
        store.acting_as("x", "email")


def test_replace_records_the_fields_it_changed(store: ScheduleStore) -> None:
    store.add("a", "t.noop", every(60))
    store.add("a", "t.noop", every(30), args=[1], replace=True)
    entry = store.audit("a")[0]
    assert entry.action == "replace"
    assert entry.changes == {
        "schedule": [every(60).to_dict(), every(30).to_dict()],
        "args": [[], [1]],
    }


def test_update_records_each_changed_field_before_and_after(store: ScheduleStore) -> None:
    store.add("a", "t.noop", every(60), gaffer={"grace": 10})
    store.update("a", every=120, gaffer={"grace": 20}, note="slower")
    entry = store.audit("a")[0]
    assert (entry.action, entry.note) == ("update", "slower")
    assert entry.changes == {
        "schedule": [every(60).to_dict(), every(120).to_dict()],
        "grace": [10.0, 20.0],
    }


def test_a_refused_write_leaves_no_entry(store: ScheduleStore) -> None:
    store.add("a", "t.noop", every(60))
    with pytest.raises(InvalidInput):
        store.update("a", task="t.unknown")
    with pytest.raises(ScheduleExists):
        store.add_all([{"name": "b", "task": "t.noop", "schedule": every(5)}, {
            "name": "a", "task": "t.noop", "schedule": every(5)
        }])  # fmt: skip
    with pytest.raises(ScheduleNotFound):
        store.remove("missing")
    with pytest.raises(ScheduleNotFound):
        store.pause("missing")
    assert [entry.action for entry in store.audit()] == ["add"]


def test_pause_with_a_note_and_time_stores_them_and_resume_clears_them(
    store: ScheduleStore, clock: FrozenClock
) -> None:
    store.add("nightly-billing", "t.noop", cron("0 2 * * *"))
    until = clock.now + timedelta(hours=2)
    paused = store.pause("nightly-billing", note="bank migration", until=until)
    assert (paused.enabled, paused.paused_note, paused.paused_until) == (
        False,
        "bank migration",
        until,
    )
    assert store.get("nightly-billing").paused_until == until
    entry = store.audit("nightly-billing")[0]
    assert (entry.action, entry.note) == ("pause", "bank migration")
    assert entry.changes == {
        "enabled": [True, False],
        "paused_note": [None, "bank migration"],
        "paused_until": [None, until.isoformat()],
    }
    resumed = store.resume("nightly-billing", note="done")
    assert (resumed.enabled, resumed.paused_note, resumed.paused_until) == (True, None, None)
    entry = store.audit("nightly-billing")[0]
    assert (entry.action, entry.note) == ("resume", "done")
    assert entry.changes == {
        "enabled": [False, True],
        "paused_note": ["bank migration", None],
        "paused_until": [until.isoformat(), None],
    }


@pytest.mark.parametrize("offset", [timedelta(0), timedelta(minutes=-5)])
def test_pause_until_now_or_before_is_refused_naming_until(
    store: ScheduleStore, clock: FrozenClock, offset: timedelta
) -> None:
    store.add("a", "t.noop", every(60))
    with pytest.raises(InvalidInput) as info:
        store.pause("a", until=clock.now + offset)
    assert info.value.field == "until"
    with pytest.raises(InvalidInput, match="until"):
        store.pause("a", until=clock.now.replace(tzinfo=None) + timedelta(hours=1))
    assert store.get("a").enabled
    assert [entry.action for entry in store.audit("a")] == ["add"]


def test_remove_trigger_and_backfill_are_recorded(store: ScheduleStore, clock: FrozenClock) -> None:
    store.add("a", "t.noop", every(60))
    key = store.trigger("a", note="by hand")
    clock.advance(600)
    report = store.backfill("a", clock.now - timedelta(seconds=180), clock.now)
    store.remove("a", note="gone")
    removed, backfilled, triggered, _ = store.audit("a")
    assert (triggered.action, triggered.note, triggered.changes) == (
        "trigger",
        "by hand",
        {"key": [None, key]},
    )
    assert backfilled.action == "backfill"
    assert backfilled.changes["sent"] == [None, report.sent]
    assert (removed.action, removed.note) == ("remove", "gone")
    assert removed.changes["name"] == ["a", None]


def test_add_many_records_one_entry_per_schedule(store: ScheduleStore) -> None:
    entries = [{"name": f"tenant-{i}", "task": "t.noop", "schedule": every(60)} for i in range(7)]
    assert store.add_many(entries, chunk_size=3) == 7
    found = store.audit(limit=50)
    assert sorted(entry.schedule or "" for entry in found) == [f"tenant-{i}" for i in range(7)]
    assert {(entry.action, entry.actor, entry.source) for entry in found} == {
        ("add", "alice", "api")
    }


def test_audit_filters_by_name_and_since_newest_first(
    store: ScheduleStore, clock: FrozenClock
) -> None:
    store.add("a", "t.noop", every(60))
    clock.advance(60)
    store.add("b", "t.noop", every(60))
    clock.advance(60)
    store.pause("a")
    assert [(e.schedule, e.action) for e in store.audit()] == [
        ("a", "pause"),
        ("b", "add"),
        ("a", "add"),
    ]
    assert [e.action for e in store.audit("a", since=clock.now - timedelta(seconds=60))] == [
        "pause"
    ]
    assert len(store.audit(limit=1)) == 1


def test_config_sync_records_adds_changes_and_removals_as_config(
    app: Celery, clock: FrozenClock
) -> None:
    beat = ScheduleStore(app, clock=clock, source="config")
    beat.sync_config({"a": {"task": "t.noop", "schedule": every(60)}})
    beat.sync_config({"a": {"task": "t.noop", "schedule": every(60)}})  # unchanged
    beat.sync_config({"a": {"task": "t.noop", "schedule": every(90)}})
    beat.sync_config({})
    found = beat.audit("a")
    assert [(e.action, e.source, e.actor) for e in found] == [
        ("remove", "config", default_actor()),
        ("update", "config", default_actor()),
        ("add", "config", default_actor()),
    ]
    assert found[1].changes == {"schedule": [every(60).to_dict(), every(90).to_dict()]}


def test_an_import_is_recorded_with_source_import_and_the_stores_actor(
    app: Celery, clock: FrozenClock
) -> None:
    store = ScheduleStore(app, clock=clock, check_tasks=False, actor="bob", audit_source="cli")
    import_beat_schedule(store, {"imported": {"task": "t.noop", "schedule": 300.0}})
    entry = only(store.audit("imported"))
    assert (entry.action, entry.actor, entry.source) == ("add", "bob", "import")


def test_resume_due_resumes_only_the_schedules_whose_time_passed(
    app: Celery, clock: FrozenClock
) -> None:
    store = ScheduleStore(app, clock=clock)
    for name in ("due", "later", "forever", "running"):
        store.add(name, "t.noop", every(60))
    until = clock.now + timedelta(minutes=5)
    store.pause("due", until=until, note="maintenance")
    store.pause("later", until=clock.now + timedelta(hours=1))
    store.pause("forever")
    clock.advance(300)
    beat = store.acting_as("beat", "beat")
    assert beat.resume_due() == ["due"]
    resumed = store.get("due")
    assert (resumed.enabled, resumed.paused_note, resumed.paused_until) == (True, None, None)
    # Its fire at the pause's end is the next: Beat sends it (by the catch-up policy).
    assert resumed.next_fire_at == until
    entry = store.audit("due")[0]
    assert (entry.action, entry.actor, entry.source) == ("resume", "beat", "beat")
    assert entry.note == f"paused until {until.isoformat()} passed"
    assert not store.get("later").enabled
    assert not store.get("forever").enabled
    assert beat.resume_due() == []
    assert [e.action for e in store.audit("due")] == ["resume", "pause", "add"]


def test_resume_due_on_postgresql_skips_rows_another_beat_holds(
    clock: FrozenClock, postgres_url: str, redis_url: str
) -> None:
    # PostgreSQL only: SQLite has one writer at a time, so no row is ever held there.
    with noop_app("audit-test-pg", postgres_url, redis_url) as app:
        _skips_held_rows(app, clock)


def _skips_held_rows(app: Celery, clock: FrozenClock) -> None:
    store = ScheduleStore(app, clock=clock)
    store.add("a", "t.noop", every(60))
    store.pause("a", until=clock.now + timedelta(minutes=1))
    clock.advance(120)
    beat = store.acting_as("beat", "beat")
    result: list[list[str]] = []
    with store.database.begin() as conn:
        # Another Beat has claimed the row and not committed yet.
        assert [s.name for s in rows.lock_due_resumes(conn, store.database.models, clock(), 10)]
        other = threading.Thread(target=lambda: result.append(beat.resume_due()))
        other.start()
        other.join(timeout=10)
        assert not other.is_alive(), "resume_due waited for the locked row"
    assert result == [[]]
    assert beat.resume_due() == ["a"]


def test_two_beats_resuming_at_once_resume_each_schedule_once(
    app: Celery, clock: FrozenClock
) -> None:
    store = ScheduleStore(app, clock=clock)
    names = [f"s{i}" for i in range(40)]
    store.add_many({"name": n, "task": "t.noop", "schedule": every(60)} for n in names)
    for name in names:
        store.pause(name, until=clock.now + timedelta(minutes=1))
    clock.advance(120)
    start = threading.Barrier(2)
    resumed: list[list[str]] = []

    def beat() -> None:
        start.wait()
        resumed.append(store.acting_as("beat", "beat").resume_due())

    threads = [threading.Thread(target=beat) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert sorted(resumed[0] + resumed[1]) == sorted(names)
    resumes = [e for e in store.audit(limit=500) if e.action == "resume"]
    assert len(resumes) == len(names)


def test_resume_due_leaves_a_schedule_still_in_error_paused_and_says_why(
    app: Celery, clock: FrozenClock
) -> None:
    ScheduleStore(app, clock=clock, check_tasks=False).add("broken", "t.gone", every(60))
    store = ScheduleStore(app, clock=clock)
    with store.database.begin() as conn:
        rows.mark_errors(conn, store.database.models, {"broken": "task: t.gone unknown"}, None)
    store.pause("broken", until=clock.now + timedelta(minutes=1))
    clock.advance(120)
    assert store.acting_as("beat", "beat").resume_due() == []
    kept = store.get("broken")
    assert (kept.enabled, kept.paused_until) == (False, None)
    entry = store.audit("broken")[0]
    assert entry.action == "update"
    assert entry.note is not None
    assert "not resumed" in entry.note
    assert "t.gone" in entry.note
    assert store.acting_as("beat", "beat").resume_due() == []  # not tried again


def test_a_pause_that_ended_while_beat_was_down_leaves_its_fires_to_the_catch_up_policy(
    app: Celery, clock: FrozenClock
) -> None:
    store = ScheduleStore(app, clock=clock)
    store.add("daily", "t.noop", cron("0 6 * * *", "Europe/London"))
    fired = store.get("daily").next_fire_at
    assert fired is not None
    store.pause("daily", until=fired, note="until the morning run")
    # Beat was down from an hour before the pause ended to an hour after it.
    clock.advance((fired - clock.now).total_seconds() + 3600)
    assert store.acting_as("beat", "beat").resume_due() == ["daily"]
    # The 06:00 fire is not dropped: it is due, for the tick's catch-up policy to decide.
    assert store.get("daily").next_fire_at == fired


def test_pausing_a_paused_schedule_with_a_note_keeps_its_time_to_resume(
    store: ScheduleStore, clock: FrozenClock
) -> None:
    store.add("job", "t.noop", every(60))
    until = clock.now + timedelta(hours=2)
    store.pause("job", note="freeze", until=until)
    store.pause("job", note="still frozen")  # a bulk pause with a note, say
    kept = store.get("job")
    assert (kept.paused_note, kept.paused_until) == ("still frozen", until)
    store.pause("job", until=until + timedelta(hours=1))
    again = store.get("job")
    assert (again.paused_note, again.paused_until) == ("still frozen", until + timedelta(hours=1))


@pytest.mark.parametrize("method", ["pause", "resume", "remove", "trigger", "update"])
def test_a_note_longer_than_the_limit_is_refused_naming_note_and_writes_nothing(
    store: ScheduleStore, method: str
) -> None:
    from celery_gaffer.schedule_store import NOTE_LENGTH

    store.add("job", "t.noop", every(60))
    before = store.audit("job")
    with pytest.raises(InvalidInput, match=r"^note: ") as refused:
        getattr(store, method)("job", note="x" * (NOTE_LENGTH + 1))
    assert refused.value.field == "note"
    assert store.audit("job") == before
    assert store.get("job").enabled


def test_looking_for_ended_pauses_takes_no_write_lock_when_none_has_ended(
    app: Celery, clock: FrozenClock, database_url: str
) -> None:
    store = ScheduleStore(app, clock=clock)
    store.add("job", "t.noop", every(60))
    store.pause("job", until=clock.now + timedelta(hours=1))
    beat = store.acting_as("beat", "beat")
    result: list[list[str]] = []
    with store.database.begin() as conn:
        # Another writer holds the database (SQLite: its one write lock; PostgreSQL: the row).
        rows.update_schedule(conn, store.database.models, "job", {"paused_note": "held"})
        other = threading.Thread(target=lambda: result.append(beat.resume_due()))
        other.start()
        other.join(timeout=5)
        assert not other.is_alive(), "resume_due waited for the writer with nothing due"
    assert result == [[]]


def test_pausing_again_after_the_time_to_resume_passed_drops_that_time(
    store: ScheduleStore, clock: FrozenClock
) -> None:
    store.add("job", "t.noop", every(60))
    store.pause("job", until=clock.now + timedelta(minutes=5))
    clock.advance(600)  # passed, and no Beat resumed it yet
    store.pause("job", note="keep it paused")
    kept = store.get("job")
    assert (kept.enabled, kept.paused_note, kept.paused_until) == (False, "keep it paused", None)
    assert store.acting_as("beat", "beat").resume_due() == []
