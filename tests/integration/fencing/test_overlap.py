"""A run's overlap lease across its whole life, on SQLite and PostgreSQL: a run that may
wait for it runs once the holder has ended, and a run fenced out by ``replace`` frees
nothing of its successor's (the start and end records' part: test_lease_durability.py)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
from celery import Celery
from sqlalchemy import func, select

from celery_gaffer import FenceLost, GafferTask, LeaseHeld
from celery_gaffer.fencing.context import RunContext
from celery_gaffer.fencing.leases import Lease
from celery_gaffer.store import database_for
from celery_gaffer.store.models import table_of
from celery_gaffer.task import current_gaffer_run

from ..marks import Mark, marks, marks_app

WAIT = 30.0  # seconds a test waits for another thread at most


@pytest.fixture
def app(database_url: str) -> Iterator[Celery]:
    app = marks_app(database_url, "overlap-lease")
    yield app
    app.close()


def run_states(app: Celery) -> list[str]:
    database = database_for(app)
    runs = database.models.JobRun
    with database.read() as conn:
        return list(conn.execute(select(runs.state).order_by(runs.id)).scalars())


def holder(app: Celery, name: str) -> tuple[str | None, bool]:
    """(owner, held now) of the lease ``name``."""
    database = database_for(app)
    table = table_of(database.models.Lease)
    with database.read() as conn:
        owner, held = conn.execute(
            select(table.c.owner, table.c.lease_until > func.now()).where(table.c.name == name)
        ).one()
    return owner, bool(held)


def test_a_run_that_may_wait_for_its_overlap_lease_runs_once_the_holder_has_ended(
    app: Celery, monkeypatch: pytest.MonkeyPatch
) -> None:
    inside, go_on, refused = threading.Event(), threading.Event(), threading.Event()
    acquire = RunContext.acquire

    def spy(self: RunContext, name: str, ttl: float, *, steal: bool = False) -> Lease:
        try:
            return acquire(self, name, ttl, steal=steal)
        except LeaseHeld:
            refused.set()
            raise

    monkeypatch.setattr(RunContext, "acquire", spy)

    @app.task(
        base=GafferTask,
        bind=True,
        shared=False,
        name="t.waiting",
        gaffer_overlap="forbid",
        gaffer_overlap_wait=WAIT,
    )
    def waiting(self: GafferTask, n: int) -> None:
        if n == 1:
            inside.set()
            assert go_on.wait(WAIT)
        with self.session() as s:
            s.add(Mark(label=f"w{n}"))

    first = threading.Thread(target=lambda: waiting.apply((1,)))
    first.start()
    assert inside.wait(WAIT)
    second = threading.Thread(target=lambda: waiting.apply((2,)))
    second.start()
    assert refused.wait(WAIT)  # the second run found the lease held, and waits
    go_on.set()
    first.join(WAIT)
    second.join(WAIT)
    assert marks(app) == ["w1", "w2"]
    assert run_states(app) == ["succeeded", "succeeded"]
    assert holder(app, "overlap:task:t.waiting") == (None, False)


def test_a_run_fenced_out_by_replace_leaves_its_successor_holding_the_lease(
    app: Celery,
) -> None:
    name = "overlap:task:t.replaced"
    old_inside, old_go_on = threading.Event(), threading.Event()
    new_inside, new_go_on = threading.Event(), threading.Event()
    owners: dict[int, str] = {}
    results: dict[int, Any] = {}

    @app.task(base=GafferTask, bind=True, shared=False, name="t.replaced", gaffer_overlap="replace")
    def replaced(self: GafferTask, n: int) -> None:
        run = current_gaffer_run()
        assert run is not None
        owners[n] = run.owner
        inside, go_on = (old_inside, old_go_on) if n == 1 else (new_inside, new_go_on)
        inside.set()
        assert go_on.wait(WAIT)
        with self.session() as s:
            s.add(Mark(label=f"r{n}"))

    def apply(n: int) -> None:
        results[n] = replaced.apply((n,)).result

    old = threading.Thread(target=apply, args=(1,))
    old.start()
    assert old_inside.wait(WAIT)
    new = threading.Thread(target=apply, args=(2,))
    new.start()
    assert new_inside.wait(WAIT)  # took the lease over
    old_go_on.set()
    old.join(WAIT)
    assert isinstance(results[1], FenceLost)
    assert holder(app, name) == (owners[2], True)  # the old run freed nothing of it
    new_go_on.set()
    new.join(WAIT)
    assert results[2] is None
    assert marks(app) == ["r2"]
    assert run_states(app) == ["fence_lost", "succeeded"]
    assert holder(app, name) == (None, False)
