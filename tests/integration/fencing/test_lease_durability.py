"""Lease statements that commit without waiting for the disk (PostgreSQL), made safe.

A server crash can lose an acquisition that no durable commit followed, and the next
holder can then be given the same fence number. These tests put the lease row in the
state such a crash leaves (the same fence, another owner) and check that the first
holder can no longer commit, renew, release or hand its fence out.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
from celery import Celery
from celery.signals import before_task_publish
from sqlalchemy import func, select, text, update

import celery_gaffer
from celery_gaffer import FenceLost, GafferTask
from celery_gaffer.fencing.leases import Lease, LeaseClient
from celery_gaffer.store import database_for
from celery_gaffer.store.models import table_of
from celery_gaffer.task import current_gaffer_run

from ..marks import Mark, marks, marks_app


@pytest.fixture
def app(postgres_url: str) -> Iterator[Celery]:
    app = marks_app(postgres_url, "lease-durability")
    yield app
    app.close()


def reissue(app: Celery, lease: Lease, owner: str = "after-the-crash") -> None:
    """The row as a crash that lost ``lease``'s acquisition leaves it, once the next
    holder has acquired: the same fence number, another owner."""
    database = database_for(app)
    table = table_of(database.models.Lease)
    with database.begin() as conn:
        conn.execute(update(table).where(table.c.name == lease.name).values(owner=owner))


def test_lease_statements_do_not_wait_for_the_disk_and_acquisitions_start_not_durable(
    app: Celery,
) -> None:
    database = database_for(app)
    with database.leases() as conn:
        assert conn.execute(text("SHOW synchronous_commit")).scalar() == "off"
    with database.begin() as conn:
        assert conn.execute(text("SHOW synchronous_commit")).scalar() == "on"
    lease = LeaseClient(database).acquire("plain", "me", 30)
    assert lease.durable is False


def test_a_reissued_fence_number_does_not_let_the_first_holder_commit(app: Celery) -> None:
    @app.task(base=GafferTask, bind=True, shared=False, name="t.reissued")
    def reissued(self: GafferTask) -> None:
        with self.lease("reissued") as lease:
            reissue(app, lease)
            with self.session() as s:
                s.add(Mark(label="stale"))

    result = reissued.apply()
    assert isinstance(result.result, FenceLost)
    assert marks(app) == []


def test_a_reissued_fence_number_is_not_renewed_released_or_handed_out(app: Celery) -> None:
    database = database_for(app)
    client = LeaseClient(database)
    lease = client.acquire("handed", "first", 30)
    reissue(app, lease)
    assert client.renew(lease) is False
    assert lease.lost
    client.release(lease)  # must not free the new holder's lease
    table = table_of(database.models.Lease)
    with database.read() as conn:
        owner, until = conn.execute(
            select(table.c.owner, table.c.lease_until).where(table.c.name == "handed")
        ).one()
    assert owner == "after-the-crash"
    assert until.year > 2000
    fresh = client.acquire("handed2", "first", 30)
    reissue(app, fresh)
    with pytest.raises(FenceLost):
        _ = fresh.fence  # cannot be made durable: another owner has that number now


def test_reading_the_fence_makes_it_durable_once_and_a_fenced_commit_does_too(
    app: Celery,
) -> None:
    seen: dict[str, object] = {}

    @app.task(base=GafferTask, bind=True, shared=False, name="t.durable")
    def durable(self: GafferTask) -> None:
        with self.lease("read-first") as lease:
            seen["before"] = lease.durable
            seen["fence"] = lease.fence  # a durable, locking check of the row
            seen["after_read"] = lease.durable
        with self.lease("commit-first") as lease:
            with self.session() as s:
                s.add(Mark(label="fenced"))
            seen["after_commit"] = lease.durable
            reissue(app, lease)  # too late to matter: the number is durable already
            seen["fence_after_commit"] = lease.fence

    durable.apply().get()
    assert seen["before"] is False
    assert seen["after_read"] is True
    assert isinstance(seen["fence"], int)
    assert seen["after_commit"] is True
    assert isinstance(seen["fence_after_commit"], int)
    assert marks(app) == ["fenced"]


def lease_row(app: Celery, name: str) -> tuple[str | None, int, bool]:
    """(owner, fence, held now) of the lease ``name``."""
    database = database_for(app)
    table = table_of(database.models.Lease)
    with database.read() as conn:
        owner, fence, held = conn.execute(
            select(table.c.owner, table.c.fence, table.c.lease_until > func.now()).where(
                table.c.name == name
            )
        ).one()
    return owner, int(fence), bool(held)


def test_an_overlap_lease_is_taken_by_the_start_record_and_freed_by_the_end_record(
    app: Celery, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On PostgreSQL the run's overlap lease costs it no statement of its own: no
    separate acquire or release, and the lease is held for the run and free after it."""
    calls: list[str] = []
    for method in ("acquire", "release"):
        original = getattr(LeaseClient, method)

        def spy(
            self: LeaseClient,
            *args: object,
            _o: object = original,
            _m: str = method,
            **kwargs: object,
        ) -> object:
            calls.append(_m)
            return _o(self, *args, **kwargs)  # type: ignore[operator]

        monkeypatch.setattr(LeaseClient, method, spy)
    seen: dict[str, object] = {}
    name = "overlap:task:t.forbidding"

    @app.task(
        base=GafferTask,
        bind=True,
        shared=False,
        name="t.forbidding",
        gaffer_key="forbidding:{n}",
        gaffer_overlap="forbid",
    )
    def forbidding(self: GafferTask, n: int) -> None:
        run = current_gaffer_run()
        assert run is not None
        seen["owner"] = run.owner
        seen["row"] = lease_row(app, name)
        with self.session() as s:
            s.add(Mark(label=f"n{n}"))

    forbidding.apply((1,)).get()
    assert seen["row"] == (seen["owner"], 1, True)  # held by this run, while it ran
    assert lease_row(app, name) == (None, 1, False)  # freed with the end record
    forbidding.apply((1,)).get()  # the key is done: a duplicate, which takes nothing
    assert lease_row(app, name) == (None, 1, False)
    assert calls == []
    assert marks(app) == ["n1"]
    database = database_for(app)
    runs = database.models.JobRun
    with database.read() as conn:
        rows = conn.execute(select(runs.state, runs.fence).order_by(runs.id)).all()
    assert [tuple(row) for row in rows] == [("succeeded", 1), ("duplicate", None)]


def test_a_duplicate_delivery_does_not_steal_the_lease_of_a_run_that_does_work(
    app: Celery,
) -> None:
    """``replace``: a redelivered fire whose key is done must not take the lease over
    from the run in progress (that run's commit would fail with FenceLost)."""
    inside, go_on = threading.Event(), threading.Event()

    @app.task(
        base=GafferTask,
        bind=True,
        shared=False,
        name="t.replacing",
        gaffer_key="replacing:{n}",
        gaffer_overlap="replace",
    )
    def replacing(self: GafferTask, n: int) -> None:
        if n == 2:
            inside.set()
            assert go_on.wait(10)
        with self.session() as s:
            s.add(Mark(label=f"r{n}"))

    replacing.apply((1,)).get()
    second = threading.Thread(target=lambda: replacing.apply((2,)))
    second.start()
    assert inside.wait(10)
    replacing.apply((1,)).get()  # a duplicate, while run 2 holds the lease
    go_on.set()
    second.join(30)
    assert marks(app) == ["r1", "r2"]
    database = database_for(app)
    runs = database.models.JobRun
    with database.read() as conn:
        states = list(conn.execute(select(runs.state).order_by(runs.id)).scalars())
    assert states == ["succeeded", "succeeded", "duplicate"]


def test_a_linked_task_is_sent_after_the_overlap_lease_is_free(app: Celery) -> None:
    """Celery sends a run's links before task_postrun: a run with links frees its lease
    itself, before they are sent, so a linked run of the same task is not skipped."""
    name = "overlap:task:t.linked"
    at_publish: list[tuple[str | None, int, bool]] = []

    @app.task(base=GafferTask, bind=True, shared=False, name="t.linked", gaffer_overlap="forbid")
    def linked(self: GafferTask, n: int) -> int:
        with self.session() as s:
            s.add(Mark(label=f"l{n}"))
        return n

    def on_publish(
        sender: object = None, headers: dict[str, object] | None = None, **_: object
    ) -> None:
        if sender == "t.linked":
            at_publish.append(lease_row(app, name))

    before_task_publish.connect(on_publish, weak=False)
    try:
        linked.apply((1,), link=linked.si(2)).get()
    finally:
        before_task_publish.disconnect(on_publish)
    assert at_publish == [(None, 1, False)]


def test_a_lease_taken_for_a_run_whose_call_never_ran_is_freed_at_its_end(
    app: Celery,
) -> None:
    class Failing(GafferTask):
        def before_start(self, task_id: str, args: object, kwargs: object) -> None:
            raise RuntimeError("before_start failed")

    @app.task(base=Failing, bind=True, shared=False, name="t.nostart", gaffer_overlap="forbid")
    def nostart(self: GafferTask) -> None:
        raise AssertionError("the body must not run")

    assert isinstance(nostart.apply().result, RuntimeError)
    assert lease_row(app, "overlap:task:t.nostart") == (None, 1, False)


def test_a_start_record_that_times_out_on_a_locked_lease_row_still_records_the_run(
    app: Celery,
) -> None:
    """The lease row locked by a commit in flight: the start record gives up the lease
    after the lock timeout and records the run alone; the run then tries the lease
    itself, waits out the timeout again, and ends skipped."""

    @app.task(base=GafferTask, bind=True, shared=False, name="t.blocked", gaffer_overlap="forbid")
    def blocked(self: GafferTask) -> None:
        with self.session() as s:
            s.add(Mark(label="ran"))

    blocked.apply().get()  # creates the lease row
    database = database_for(app)
    table = table_of(database.models.Lease)
    with database.begin() as conn:
        conn.execute(text("SET LOCAL idle_in_transaction_session_timeout = 0"))
        conn.execute(select(table.c.fence).with_for_update())
        blocked.apply().get()
    assert marks(app) == ["ran"]
    runs = database.models.JobRun
    with database.read() as conn:
        states = list(conn.execute(select(runs.state).order_by(runs.id)).scalars())
    assert states == ["succeeded", "skipped"]


def test_a_run_that_fails_before_its_body_still_frees_the_overlap_lease_its_start_took(
    app: Celery,
) -> None:
    @app.task(
        base=GafferTask,
        bind=True,
        shared=False,
        name="t.badkey",
        gaffer_key="bad:{missing}",
        gaffer_overlap="forbid",
    )
    def badkey(self: GafferTask) -> None:
        raise AssertionError("the body must not run")

    result = badkey.apply()
    assert isinstance(result.result, celery_gaffer.InvalidInput)
    owner, fence, held = lease_row(app, "overlap:task:t.badkey")
    assert (owner, fence, held) == (None, 1, False)
