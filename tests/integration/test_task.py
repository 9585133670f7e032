"""GafferTask in-process (Celery's tracer via ``apply``) on real SQLite and PostgreSQL."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from datetime import datetime, timezone
from typing import Any

import pytest
from celery import Celery
from sqlalchemy import Integer, String, func, insert, select, text
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

import celery_gaffer
from celery_gaffer import FenceLost, GafferTask, LeaseHeld
from celery_gaffer.fencing.leases import LeaseClient
from celery_gaffer.store import database_for, dispose_engines
from celery_gaffer.store.models import table_of


class Base(DeclarativeBase):
    pass


class Effect(Base):
    __tablename__ = "test_effects"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    label: Mapped[str] = mapped_column(String(200))
    fence: Mapped[int | None] = mapped_column(Integer, nullable=True)


class Item(Base):
    __tablename__ = "test_items"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    handled: Mapped[int] = mapped_column(Integer, default=0)


@pytest.fixture
def app(database_url: str) -> Iterator[Celery]:
    app = Celery("task-test", broker="memory://", set_as_current=False)
    app.conf.gaffer_database_url = database_url
    app.conf.gaffer_lease_ttl = 2
    celery_gaffer.install(app)
    engine = database_for(app).engine
    Base.metadata.drop_all(engine)
    Base.metadata.create_all(engine)
    yield app
    app.close()


def effects(app: Celery) -> list[tuple[str, int | None]]:
    with database_for(app).session() as s:
        return [(e.label, e.fence) for e in s.scalars(select(Effect).order_by(Effect.id))]


def run_states(app: Celery, task_name: str) -> list[str]:
    database = database_for(app)
    runs = database.models.JobRun
    with database.read() as conn:
        return list(
            conn.execute(
                select(runs.state).where(runs.task_name == task_name).order_by(runs.id)
            ).scalars()
        )


def test_the_same_key_twice_has_one_effect_and_the_second_run_is_a_duplicate(app: Celery) -> None:
    @app.task(
        base=GafferTask,
        bind=True,
        gaffer_key="invoice.settled:{invoice_id}",
        shared=False,
        name="t.settle",
    )
    def settle(self: GafferTask, invoice_id: int) -> str:
        with self.session() as s:
            s.add(Effect(label=f"settled {invoice_id}"))
        return "done"

    assert settle.apply((42,)).get() == "done"
    assert settle.apply((42,)).get() is None
    assert settle.apply(kwargs={"invoice_id": 43}).get() == "done"
    assert effects(app) == [("settled 42", None), ("settled 43", None)]
    assert run_states(app, "t.settle") == ["succeeded", "duplicate", "succeeded"]
    database = database_for(app)
    runs = database.models.JobRun
    with database.read() as conn:
        keys = conn.execute(select(runs.key).order_by(runs.id)).scalars().all()
    assert keys == ["invoice.settled:42"] * 2 + ["invoice.settled:43"]


def test_two_deliveries_at_once_commit_one_effect(app: Celery) -> None:
    started = threading.Barrier(2)

    @app.task(base=GafferTask, bind=True, gaffer_key="k:{n}", shared=False, name="t.slow")
    def slow(self: GafferTask, n: int) -> None:
        started.wait(10)
        with self.session() as s:
            s.add(Effect(label=f"slow {n}"))
            s.flush()
            time.sleep(0.3)  # both transactions are open at once

    threads = [threading.Thread(target=lambda: slow.apply((7,))) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert effects(app) == [("slow 7", None)]
    assert sorted(run_states(app, "t.slow")) == ["duplicate", "succeeded"]


def test_a_stale_fence_cannot_commit(app: Celery) -> None:
    stolen = threading.Event()
    holding = threading.Event()

    @app.task(base=GafferTask, bind=True, shared=False, name="t.fenced")
    def fenced(self: GafferTask) -> None:
        with self.lease("reports", ttl=30) as lease:
            with self.session() as s:
                s.add(Effect(label="before", fence=lease.fence))
            holding.set()
            stolen.wait(10)
            with self.session() as s:
                s.add(Effect(label="after", fence=lease.fence))

    worker = threading.Thread(target=lambda: fenced.apply())
    worker.start()
    assert holding.wait(10)
    thief = LeaseClient(database_for(app)).acquire("reports", "thief", 30, steal=True)
    stolen.set()
    worker.join(30)
    assert effects(app) == [("before", thief.fence - 1)]
    assert run_states(app, "t.fenced") == ["fence_lost"]
    database = database_for(app)
    runs = database.models.JobRun
    with database.read() as conn:
        error_type, fence = conn.execute(select(runs.error_type, runs.fence)).one()
    assert error_type == "FenceLost"
    assert fence == thief.fence - 1


#: 6 s: the renewer (every 2 s) must win against a loaded 2-core CI machine, whose disk
#: can stall a SQLite write for seconds (with 4 s, CI's run on the lowest versions once
#: saw a renewal come later than the TTL).
RENEWAL_TTL = 6.0


def test_renewal_keeps_a_run_alive_for_five_times_its_ttl(app: Celery) -> None:
    contender_errors: list[str] = []
    done = threading.Event()
    holding = threading.Event()
    leaving = threading.Event()

    @app.task(base=GafferTask, bind=True, shared=False, name="t.long")
    def long(self: GafferTask) -> int:
        with self.lease("long", ttl=RENEWAL_TTL) as lease:
            holding.set()
            deadline = time.monotonic() + 5 * RENEWAL_TTL
            while time.monotonic() < deadline:
                time.sleep(0.05)
            lease.check()
            with self.session() as s:
                s.add(Effect(label="end", fence=lease.fence))
            leaving.set()  # from here the lease is released: taking it is no longer a fault
            return lease.fence

    def contend() -> None:
        client = LeaseClient(database_for(app))
        while not done.is_set():
            try:
                client.acquire("long", "contender", RENEWAL_TTL)
            except LeaseHeld:
                pass
            else:
                # An acquisition seen before the holder began to leave happened while it
                # held the lease (it releases after setting the flag). Once it has begun,
                # the contender may take the released lease: CI once did, in the moment
                # between the release and done.set().
                if not leaving.is_set():
                    contender_errors.append("acquired")
            time.sleep(0.1)

    result: list[Any] = []
    worker = threading.Thread(target=lambda: result.append(long.apply().get()))
    worker.start()
    assert holding.wait(10)
    contender = threading.Thread(target=contend)
    contender.start()
    worker.join(45)
    done.set()
    contender.join(10)
    assert contender_errors == []
    assert effects(app) == [("end", result[0])]


def test_overlap_forbid_skips_and_replace_fences_out_the_old_run(app: Celery) -> None:
    release = threading.Event()
    inside = threading.Event()

    @app.task(base=GafferTask, bind=True, shared=False, name="t.exclusive", gaffer_overlap="forbid")
    def exclusive(self: GafferTask, label: str) -> None:
        if label in ("first", "old"):
            inside.set()
            release.wait(10)
        with self.session() as s:
            s.add(Effect(label=label))

    first = threading.Thread(target=lambda: exclusive.apply(("first",)))
    first.start()
    assert inside.wait(10)
    exclusive.apply(("second",))  # returns at once: skipped
    release.set()
    first.join(30)
    assert effects(app) == [("first", None)]
    assert run_states(app, "t.exclusive") == ["succeeded", "skipped"]

    release.clear()
    inside.clear()
    exclusive.gaffer_overlap = "replace"
    old = threading.Thread(target=lambda: exclusive.apply(("old",)))
    old.start()
    assert inside.wait(10)
    exclusive.apply(("new",))  # takes the lease over from the running "old"
    release.set()
    old.join(30)
    assert [label for label, _ in effects(app)] == ["first", "new"]
    assert run_states(app, "t.exclusive") == ["succeeded", "skipped", "fence_lost", "succeeded"]


def _fill_items(app: Celery, n: int) -> None:
    with database_for(app).session() as s:
        s.execute(text("DELETE FROM test_items"))
        s.add_all(Item(id=i, handled=0) for i in range(1, n + 1))
        s.commit()


def _fetch(session: Session, after: Any, limit: int) -> list[Item]:
    query = select(Item).order_by(Item.id).limit(limit)
    if after is not None:
        query = query.where(Item.id > after)
    return list(session.scalars(query))


def test_batches_resume_from_the_saved_cursor_and_handle_each_row_once(app: Celery) -> None:
    _fill_items(app, 1000)
    crash_at = [550]

    def handle(session: Session, item: Item) -> None:
        if item.id == crash_at[0]:
            raise RuntimeError("worker died")
        item.handled += 1

    @app.task(
        base=GafferTask, bind=True, shared=False, name="t.batches", gaffer_key="nightly:{day}"
    )
    def batches(self: GafferTask, day: str) -> dict[str, Any]:
        report = self.run_batches("items", _fetch, handle, key=lambda item: item.id, batch_size=100)
        return {
            "processed": report.processed,
            "caught_up": report.caught_up,
            "cursor": report.cursor,
        }

    first = batches.apply(("2026-06-01",))
    assert first.failed()
    crash_at[0] = -1
    second = batches.apply(("2026-06-01",))
    assert second.get() == {"processed": 500, "caught_up": True, "cursor": 1000}
    assert batches.apply(("2026-06-01",)).get() is None  # the key is completed: duplicate
    with database_for(app).session() as s:
        counts = s.execute(select(Item.handled, func.count()).group_by(Item.handled)).all()
    assert counts == [(1, 1000)]
    assert run_states(app, "t.batches") == ["failed", "succeeded", "duplicate"]


def test_a_deadline_stops_cleanly_and_the_next_run_continues(app: Celery) -> None:
    _fill_items(app, 300)

    def handle(session: Session, item: Item) -> None:
        time.sleep(0.004)
        item.handled += 1

    @app.task(base=GafferTask, bind=True, shared=False, name="t.bounded")
    def bounded(self: GafferTask) -> dict[str, Any]:
        report = self.run_batches(
            "bounded", _fetch, handle, key=lambda item: item.id, batch_size=50, deadline=0.3
        )
        return {
            "caught_up": report.caught_up,
            "stopped_by": report.stopped_by,
            "processed": report.processed,
        }

    reports = []
    for _ in range(50):
        reports.append(bounded.apply().get())
        if reports[-1]["caught_up"]:
            break
    assert reports[0]["stopped_by"] == "deadline"
    assert reports[-1]["stopped_by"] == "caught_up"
    assert sum(r["processed"] for r in reports) == 300
    with database_for(app).session() as s:
        assert s.execute(select(func.min(Item.handled), func.max(Item.handled))).one() == (1, 1)


def test_renewal_failure_stops_the_run_at_its_next_commit(app: Celery) -> None:
    @app.task(base=GafferTask, bind=True, shared=False, name="t.lost")
    def lost(self: GafferTask) -> None:
        with self.lease("lost", ttl=0.6) as lease:
            LeaseClient(database_for(app)).acquire("lost", "thief", 30, steal=True)
            time.sleep(0.6)  # the renewer finds the fence stale
            assert lease.lost
            with pytest.raises(FenceLost):
                lease.check()
            with self.session() as s:
                s.add(Effect(label="never"))

    lost.apply()
    assert effects(app) == []
    assert run_states(app, "t.lost") == ["fence_lost"]


def test_a_contender_gives_up_on_a_lease_row_locked_by_a_paused_commit(postgres_url: str) -> None:
    """A holder stopped inside its fenced commit holds the lease row's lock: a contender
    (even one stealing the lease) waits at most the lease lock timeout, then gets
    LeaseHeld, instead of blocking for as long as the holder is stopped."""
    from celery_gaffer.store.engine import LEASE_LOCK_TIMEOUT_MS
    from celery_gaffer.store.leases import check_fence

    app = Celery("lease-lock", broker="memory://", set_as_current=False)
    app.conf.gaffer_database_url = postgres_url
    database = database_for(app)
    client = LeaseClient(database)
    lease = client.acquire("locked", "holder", 30)
    with database.begin() as conn:
        # Idle in its transaction on purpose, whatever the database's default says.
        conn.execute(text("SET LOCAL idle_in_transaction_session_timeout = 0"))
        check_fence(conn, database.models, "locked", lease.token, lease.owner)  # in flight
        started = time.monotonic()
        with pytest.raises(LeaseHeld, match="busy"):
            client.acquire("locked", "contender", 30, steal=True)
        waited = time.monotonic() - started
    assert LEASE_LOCK_TIMEOUT_MS / 1000 * 0.9 <= waited < LEASE_LOCK_TIMEOUT_MS / 1000 + 5
    # Once the holder's transaction ends the row is free again: the steal succeeds.
    assert client.acquire("locked", "contender", 30, steal=True).token == lease.token + 1
    app.close()


def test_a_keyed_run_whose_lease_was_taken_cannot_commit_or_complete_its_key(
    app: Celery,
) -> None:
    """The fence check and the key claim of one commit (one statement on PostgreSQL)."""
    holding = threading.Event()
    stolen = threading.Event()

    @app.task(base=GafferTask, bind=True, gaffer_key="k:{n}", shared=False, name="t.kf")
    def keyed(self: GafferTask, n: int) -> None:
        with self.lease("keyed-lease", ttl=30) as lease:
            holding.set()
            stolen.wait(10)
            with self.session() as s:
                s.add(Effect(label=f"keyed {n}", fence=lease.fence))

    worker = threading.Thread(target=lambda: keyed.apply((1,)))
    worker.start()
    assert holding.wait(10)
    client = LeaseClient(database_for(app))
    thief = client.acquire("keyed-lease", "thief", 30, steal=True)
    stolen.set()
    worker.join(30)
    assert effects(app) == []
    assert run_states(app, "t.kf") == ["fence_lost"]
    database = database_for(app)
    keys = database.models.IdempotencyKey
    with database.read() as conn:
        assert conn.execute(select(keys.key)).all() == []
    client.release(thief)
    keyed.apply((1,))  # a later delivery holds a fresh fence: its commit goes through
    assert [label for label, _ in effects(app)] == ["keyed 1"]


def test_a_key_completed_while_a_fenced_run_worked_makes_its_commit_a_duplicate(
    app: Celery,
) -> None:
    working = threading.Event()
    completed = threading.Event()

    @app.task(base=GafferTask, bind=True, gaffer_key="k:{n}", shared=False, name="t.kc")
    def keyed(self: GafferTask, n: int) -> None:
        with self.lease(f"lease-{n}", ttl=30):
            working.set()
            completed.wait(10)
            with self.session() as s:
                s.add(Effect(label=f"late {n}"))

    worker = threading.Thread(target=lambda: keyed.apply((2,)))
    worker.start()
    assert working.wait(10)
    with database_for(app).begin() as conn:  # another delivery finished the same work
        conn.execute(
            insert(table_of(database_for(app).models.IdempotencyKey)).values(
                key="k:2",
                state="completed",
                task_id="other",
                claimed_at=datetime.now(timezone.utc),
                completed_at=datetime.now(timezone.utc),
            )
        )
    completed.set()
    worker.join(30)
    assert effects(app) == []
    assert run_states(app, "t.kc") == ["duplicate"]


def test_the_renewer_wakes_for_a_shorter_ttl_and_only_then() -> None:
    """The renewer thread sleeps until its earliest renewal. A lease with a shorter TTL
    added meanwhile wakes it (else it would miss its renewals); one due later does not
    (a thread switch per run saved). Real threads and time, generous bounds."""
    from celery_gaffer.fencing.leases import Lease
    from celery_gaffer.fencing.renewer import Renewer

    class Client:
        def __init__(self) -> None:
            self.renewed: list[str] = []

        def renew(self, lease: Lease) -> bool:
            self.renewed.append(lease.name)
            return True

    client = Client()
    renewer = Renewer()
    slow = Lease(name="slow", fence=1, ttl=300.0, client=client)  # type: ignore[arg-type]
    renewer.add(slow)
    deadline = time.monotonic() + 5
    while renewer._sleeping_until < time.monotonic() + 60 and time.monotonic() < deadline:
        time.sleep(0.01)  # the thread is now asleep until slow's renewal, 100 s away
    assert renewer._sleeping_until > time.monotonic() + 60
    woken = threading.Event()
    original_set = renewer._wake.set
    renewer._wake.set = lambda: (woken.set(), original_set())[1]  # type: ignore[method-assign]
    renewer.add(Lease(name="later", fence=1, ttl=600.0, client=client))  # type: ignore[arg-type]
    assert not woken.is_set()
    renewer.add(Lease(name="fast", fence=1, ttl=0.3, client=client))  # type: ignore[arg-type]
    assert woken.is_set()
    while client.renewed.count("fast") < 3 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert client.renewed.count("fast") >= 3  # every 0.1 s, not after 100 s
    assert "slow" not in client.renewed
    assert "later" not in client.renewed


def test_a_lease_added_while_the_renewer_sleeps_is_renewed_a_third_of_its_ttl_after_it() -> None:
    """Not woken for a lease with the same TTL, the thread must still renew it a third
    of its TTL after it was added (about 2 s here), not a third of its TTL after the
    thread next looks (about 4 s). Real threads and time; bounds of a second."""
    from celery_gaffer.fencing.leases import Lease
    from celery_gaffer.fencing.renewer import Renewer

    renewed: dict[str, float] = {}

    class Client:
        def renew(self, lease: Lease) -> bool:
            renewed.setdefault(lease.name, time.monotonic())
            return True

    renewer = Renewer()
    renewer.add(Lease(name="a", fence=1, ttl=6.0, client=Client()))  # type: ignore[arg-type]
    deadline = time.monotonic() + 10
    while renewer._sleeping_until < time.monotonic() + 1.5 and time.monotonic() < deadline:
        time.sleep(0.01)  # asleep until a's renewal, about 2 s away
    added = time.monotonic()
    renewer.add(Lease(name="b", fence=1, ttl=6.0, client=Client()))  # type: ignore[arg-type]
    while "b" not in renewed and time.monotonic() < deadline:
        time.sleep(0.02)
    assert 1.5 < renewed["b"] - added < 3.0


def test_a_keyed_run_that_never_opens_a_session_still_completes_its_key(
    app: Celery, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its body writes elsewhere (here: a plain session, not self.session()): the key is
    completed after the body, so a second delivery is a duplicate, and the task is told
    once that this is not atomic."""
    calls: list[int] = []
    monkeypatch.setattr("celery_gaffer.task._warned_unfenced", set())  # once per process

    @app.task(base=GafferTask, bind=True, shared=False, gaffer_key="mail:{n}", name="t.mail")
    def mail(self: GafferTask, n: int) -> None:
        calls.append(n)

    with caplog.at_level("WARNING", logger="celery_gaffer.task"):
        mail.apply((1,))
        mail.apply((1,))
        mail.apply((2,))
    assert calls == [1, 2]
    assert run_states(app, "t.mail") == ["succeeded", "duplicate", "succeeded"]
    unfenced = [r for r in caplog.records if getattr(r, "action", None) == "key_unfenced"]
    assert len(unfenced) == 1
    assert "not atomically" in unfenced[0].getMessage()


@pytest.mark.postgres
def test_run_records_survive_a_database_restart_that_left_every_pooled_connection_stale(
    postgres_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    app = Celery("survive", broker="memory://", set_as_current=False)
    app.conf.gaffer_database_url = postgres_url
    celery_gaffer.install(app)
    database = database_for(app)

    @app.task(base=GafferTask, bind=True, shared=False, name="t.survive")
    def survive(self: GafferTask, n: int) -> int:
        return n

    survive.apply((1,))  # every engine now holds idle pooled connections
    others = "WHERE datname = current_database() AND pid <> pg_backend_pid()"
    with database.engine.connect() as killer:
        # What a restart does to them: every other backend of this database ends.
        assert killer.execute(text(f"SELECT count(*) FROM pg_stat_activity {others}")).scalar()
        killer.execute(text(f"SELECT pg_terminate_backend(pid) FROM pg_stat_activity {others}"))
        for _ in range(100):
            if not killer.execute(text(f"SELECT count(*) FROM pg_stat_activity {others}")).scalar():
                break
            time.sleep(0.05)
    with caplog.at_level("WARNING", logger="celery_gaffer"):
        assert survive.apply((2,)).get() == 2
    dispose_engines()  # this test's own reads must not use a connection it killed either
    assert run_states(app, "t.survive") == ["succeeded", "succeeded"]
    assert not [r for r in caplog.records if getattr(r, "action", None) == "run_record_failed"]
    app.close()


def test_a_workers_run_end_goes_to_the_writer_thread_unless_something_waits_on_it(
    app: Celery, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Traced as a worker traces a delivery (not eager): the end of a run that holds no
    lease is queued; an eager run's, and on PostgreSQL that of a run whose end record
    frees its overlap lease, are written before the task returns. The writer's thread
    is held up meanwhile, so an end that went to it is still ``running`` after."""
    from celery.app.trace import build_tracer

    from celery_gaffer.runs import endings

    queued: list[str] = []
    submit = endings.EndWriter.submit

    def spy(self: endings.EndWriter, write: Any, **options: Any) -> bool:
        queued.append(current[0])
        return submit(self, write, **options)

    monkeypatch.setattr(endings.EndWriter, "submit", spy)
    current = [""]
    writer = endings.end_writer()

    @app.task(base=GafferTask, bind=True, shared=False, name="t.keyed", gaffer_key="k:{n}")
    def keyed(self: GafferTask, n: int) -> None:
        with self.session() as s:
            s.add(Effect(label=f"keyed {n}"))

    @app.task(base=GafferTask, bind=True, shared=False, name="t.held", gaffer_overlap="forbid")
    def held(self: GafferTask) -> None:
        with self.session() as s:
            s.add(Effect(label="held"))

    def delivered(task: Any, *args: Any) -> None:
        current[0] = task.name
        tracer = build_tracer(task.name, task, app=app, eager=False)
        task_id = f"{task.name}-{time.monotonic_ns()}"
        tracer(task_id, args, {}, {"id": task_id, "delivery_info": {}})

    def hold_up_the_writer() -> None:
        gate = threading.Event()
        writer.submit(lambda: gate.wait(30))
        threading.Timer(5.0, gate.set).start()

    delivered(keyed, 1)
    assert queued == ["t.keyed"]  # its end went to the thread

    hold_up_the_writer()
    delivered(held)
    if database_for(app).dialect == "postgresql":
        assert run_states(app, "t.held") == ["succeeded"]  # its end record frees the lease
    else:
        assert run_states(app, "t.held") == ["running"]  # SQLite: the run freed it itself

    hold_up_the_writer()
    keyed.apply((2,))
    assert run_states(app, "t.keyed")[-1] == "succeeded"  # eager: written before it returned

    writer.write_in_order(lambda: None)  # the queued ends are written
    assert run_states(app, "t.keyed") == ["succeeded", "succeeded"]
    assert run_states(app, "t.held") == ["succeeded"]
