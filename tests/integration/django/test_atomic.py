"""``self.atomic()`` on real PostgreSQL and SQLite through Django's ORM: the seal refuses a
stale holder's writes and a completed key's, in the transaction of the writes."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from celery import Celery
from sqlalchemy import select

import celery_gaffer
from celery_gaffer import FenceLost, GafferError, GafferTask
from celery_gaffer.fencing.leases import LeaseClient
from celery_gaffer.store import database_for, django_statements, models_for
from celery_gaffer.store.keys import claim_key, key_state


@pytest.fixture(params=["postgresql", "sqlite"])
def alias(request: pytest.FixtureRequest, django_project: dict[str, Any]) -> str:
    """Django's alias of a database holding the Gaffer tables, all of them emptied."""
    from django.db import connections

    alias = {"postgresql": "default", "sqlite": "lite"}[request.param]
    tables = [table.name for table in models_for("gaffer_").metadata.sorted_tables]
    with connections[alias].cursor() as cursor:
        for table in [*tables, "gaffer_tests_effect", "gaffer_tests_item"]:
            cursor.execute(f"DELETE FROM {table}")
    return alias


@pytest.fixture
def app(alias: str) -> Iterator[Celery]:
    app = Celery("django-atomic-test", broker="memory://", set_as_current=False)
    app.conf.gaffer_database_url = f"django://{alias}"
    celery_gaffer.install(app)
    yield app
    app.close()


def run_states(app: Celery, task_name: str) -> list[str]:
    database = database_for(app)
    runs = database.models.JobRun
    with database.read() as conn:
        statement = select(runs.state).where(runs.task_name == task_name).order_by(runs.id)
        return list(conn.execute(statement).scalars())


def effects(alias: str) -> list[str]:
    from tests.djangoapp.models import Effect

    return list(Effect.objects.using(alias).order_by("id").values_list("label", flat=True))


def write(alias: str, label: str) -> None:
    from tests.djangoapp.models import Effect

    Effect.objects.using(alias).create(label=label)


def stale_run(
    app: Celery, alias: str, name: str, body: Callable[[GafferTask], None]
) -> tuple[threading.Thread, threading.Event, list[Any]]:
    """A task holding the lease ``name`` whose ``body(self)`` runs after a thief took the
    lease over (set the returned event once it has); its result lands in the list."""
    holding, stolen, results = threading.Event(), threading.Event(), []

    @app.task(base=GafferTask, bind=True, shared=False, name=f"t.{name}")
    def task(self: GafferTask) -> None:
        with self.lease(name, ttl=30):
            with self.atomic():
                write(alias, "before")
            holding.set()
            stolen.wait(10)
            body(self)

    def deliver() -> None:
        from django.db import connections

        try:
            results.append(task.apply().result)
        finally:
            connections.close_all()

    worker = threading.Thread(target=deliver)
    worker.start()
    assert holding.wait(10)
    LeaseClient(database_for(app)).acquire(name, "thief", 30, steal=True)
    return worker, stolen, results


def late_write(alias: str) -> Callable[[GafferTask], None]:
    def body(self: GafferTask) -> None:
        with self.atomic():
            write(alias, "late")

    return body


def test_a_paused_holders_late_orm_write_is_refused_and_rolled_back(
    app: Celery, alias: str
) -> None:
    worker, stolen, results = stale_run(app, alias, "paused", late_write(alias))
    stolen.set()
    worker.join(30)
    assert isinstance(results[0], FenceLost), results
    assert effects(alias) == ["before"]


def test_without_the_seal_the_late_write_lands_so_the_test_above_can_fail(
    app: Celery, alias: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The checker's own check: with the seal made a no-op, the stale write commits."""
    monkeypatch.setattr(django_statements, "seal", lambda *args, **kwargs: None)
    worker, stolen, results = stale_run(app, alias, "unchecked", late_write(alias))
    stolen.set()
    worker.join(30)
    assert results == [None]
    assert effects(alias) == ["before", "late"]


def test_a_duplicate_delivery_with_a_key_writes_once(app: Celery, alias: str) -> None:
    @app.task(base=GafferTask, bind=True, shared=False, name="t.settle", gaffer_key="inv:{n}")
    def settle(self: GafferTask, n: int) -> None:
        with self.atomic():
            write(alias, f"settled {n}")

    first = settle.apply(args=(7,))
    second = settle.apply(args=(7,))
    assert first.successful()
    assert second.successful()
    assert effects(alias) == ["settled 7"]
    assert run_states(app, "t.settle") == ["succeeded", "duplicate"]
    database = database_for(app)
    with database.read() as conn:
        assert key_state(conn, database.models, "inv:7") == "completed"


def test_two_deliveries_at_once_commit_one_effect_the_other_ends_duplicate(
    app: Celery, alias: str
) -> None:
    """Both pass the check at their start; the second to seal finds the key completed,
    and its writes are rolled back."""
    started = threading.Barrier(2, timeout=10)

    @app.task(base=GafferTask, bind=True, shared=False, name="t.pay", gaffer_key="pay:{n}")
    def pay(self: GafferTask, n: int) -> None:
        started.wait()
        with self.atomic():
            write(alias, f"paid {n}")

    def deliver() -> None:
        from django.db import connections

        try:
            pay.apply(args=(1,))
        finally:
            connections.close_all()

    threads = [threading.Thread(target=deliver) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert effects(alias) == ["paid 1"]
    assert sorted(run_states(app, "t.pay")) == ["duplicate", "succeeded"]


def test_a_nested_atomic_is_a_savepoint_sealed_with_its_transaction(
    app: Celery, alias: str
) -> None:
    from django.db import transaction

    @app.task(base=GafferTask, bind=True, shared=False, name="t.nested", gaffer_key="nested")
    def nested(self: GafferTask) -> None:
        with self.atomic():
            write(alias, "outer")
            try:
                with transaction.atomic(using=alias):
                    write(alias, "rolled back")
                    raise ValueError("undo the savepoint")
            except ValueError:
                pass
            with transaction.atomic(using=alias), self.atomic():
                write(alias, "inner")

    assert nested.apply().successful()
    assert effects(alias) == ["outer", "inner"]
    database = database_for(app)
    with database.read() as conn:
        assert key_state(conn, database.models, "nested") == "completed"


def test_a_stale_fence_rolls_back_the_nested_blocks_too(app: Celery, alias: str) -> None:
    from django.db import transaction

    def body(self: GafferTask) -> None:
        with self.atomic():
            write(alias, "outer")
            with transaction.atomic(using=alias):
                write(alias, "nested")

    worker, stolen, results = stale_run(app, alias, "nested-stale", body)
    stolen.set()
    worker.join(30)
    assert isinstance(results[0], FenceLost)
    assert effects(alias) == ["before"]


def test_atomic_inside_a_plain_atomic_block_is_refused(app: Celery, alias: str) -> None:
    from django.db import transaction

    @app.task(base=GafferTask, bind=True, shared=False, name="t.inside")
    def inside(self: GafferTask) -> None:
        with transaction.atomic(using=alias), self.atomic():
            write(alias, "never")

    result = inside.apply()
    assert isinstance(result.result, GafferError)
    assert "inside a transaction.atomic() block" in str(result.result)
    assert effects(alias) == []


def test_on_commit_runs_after_the_sealed_commit_and_never_after_a_refused_one(
    app: Celery, alias: str
) -> None:
    from django.db import transaction

    called: list[str] = []

    @app.task(base=GafferTask, bind=True, shared=False, name="t.hook", gaffer_key="hook:{n}")
    def hook(self: GafferTask, n: int) -> None:
        with self.atomic():
            write(alias, f"hook {n}")
            transaction.on_commit(lambda: called.append(f"committed {n}"), using=alias)
            assert called == []

    assert hook.apply(args=(1,)).successful()
    assert called == ["committed 1"]
    hook.apply(args=(1,))  # a duplicate: its seal refuses, its callback never runs
    assert called == ["committed 1"]

    def body(self: GafferTask) -> None:
        with self.atomic():
            write(alias, "late")
            transaction.on_commit(lambda: called.append("stale"), using=alias)

    worker, stolen, results = stale_run(app, alias, "hook-stale", body)
    stolen.set()
    worker.join(30)
    assert isinstance(results[0], FenceLost)
    assert called == ["committed 1"]


def test_a_key_completed_while_the_run_worked_makes_its_commit_a_duplicate(
    app: Celery, alias: str
) -> None:
    """Another delivery completes the key after this one's start: AlreadyProcessed at
    the seal rolls the block back and the run ends duplicate, as a fenced session's."""
    database = database_for(app)

    @app.task(base=GafferTask, bind=True, shared=False, name="t.race", gaffer_key="race")
    def race(self: GafferTask) -> None:
        with database.begin() as conn:
            claim_key(conn, database.models, "race", "other", None, complete=True)
        with self.atomic():
            write(alias, "mine")

    assert race.apply().successful()
    assert effects(alias) == []
    assert run_states(app, "t.race") == ["duplicate"]


def test_run_batches_with_the_django_orm_handles_each_row_once_and_resumes(
    app: Celery, alias: str
) -> None:
    """The first delivery dies in its second batch: the first batch and its cursor are
    committed, the second rolled back; the next delivery resumes after the first batch."""
    from tests.djangoapp.models import Item

    Item.objects.using(alias).bulk_create([Item(handled=0) for _ in range(25)])
    handled = [0]
    dies_at: list[int | None] = [15]

    @app.task(base=GafferTask, bind=True, shared=False, name="t.sweep", gaffer_key="sweep")
    def sweep(self: GafferTask) -> int:
        def fetch(after: Any, limit: int) -> list[Any]:
            rows = Item.objects.using(alias).order_by("id")
            if after is not None:
                rows = rows.filter(id__gt=after)
            return list(rows[:limit])

        def handle(row: Any) -> None:
            handled[0] += 1
            if handled[0] == dies_at[0]:
                raise RuntimeError("the worker dies half-way")
            Item.objects.using(alias).filter(id=row.id).update(handled=row.handled + 1)

        report = self.run_batches(
            "items", fetch, handle, key=lambda row: row.id, batch_size=10, orm="django"
        )
        return report.processed

    first = sweep.apply()
    assert isinstance(first.result, RuntimeError)
    assert Item.objects.using(alias).filter(handled=1).count() == 10
    dies_at[0] = None
    second = sweep.apply()
    assert second.successful(), second.result
    assert second.result == 15
    assert list(Item.objects.using(alias).values_list("handled", flat=True).distinct()) == [1]
    database = database_for(app)
    with database.read() as conn:
        assert key_state(conn, database.models, "sweep") == "completed"
    assert sweep.apply().result is None  # the key is completed: a duplicate
    assert run_states(app, "t.sweep") == ["failed", "succeeded", "duplicate"]


def test_under_debug_djangos_logging_cursors_take_the_statements_too(
    app: Celery, alias: str
) -> None:
    """With DEBUG on, Django's cursors log each query by formatting it with ``%``: the
    statements' literal percent signs (SQLite's strftime) are written ``%%``."""
    from django.test import override_settings

    from tests.djangoapp.models import Item

    Item.objects.using(alias).bulk_create([Item(handled=0) for _ in range(3)])

    @app.task(base=GafferTask, bind=True, shared=False, name="t.debug", gaffer_key="debug")
    def debug(self: GafferTask) -> int:
        with self.atomic():
            write(alias, "logged")
        report = self.run_batches(
            "debug-items",
            lambda after, limit: list(Item.objects.using(alias).order_by("id")[:limit]),
            lambda row: None,
            key=lambda row: row.id,
            batch_size=10,
            orm="django",
        )
        return report.processed

    with override_settings(DEBUG=True):
        result = debug.apply()
    assert result.successful(), result.result
    assert result.result == 3
    assert effects(alias) == ["logged"]


def test_a_block_marked_for_rollback_is_not_sealed_and_writes_nothing(
    app: Celery, alias: str
) -> None:
    from django.db import transaction

    @app.task(base=GafferTask, bind=True, shared=False, name="t.undo")
    def undo(self: GafferTask) -> None:
        with self.atomic():
            write(alias, "undone")
            transaction.set_rollback(True, using=alias)

    result = undo.apply()
    assert result.successful(), result.result
    assert effects(alias) == []


def test_autocommit_off_is_refused_its_block_would_not_commit(app: Celery, alias: str) -> None:
    from django.db import transaction

    @app.task(base=GafferTask, bind=True, shared=False, name="t.manual")
    def manual(self: GafferTask) -> None:
        with self.atomic():
            write(alias, "never")

    transaction.set_autocommit(False, using=alias)
    try:
        result = manual.apply()
    finally:
        transaction.rollback(using=alias)
        transaction.set_autocommit(True, using=alias)
    assert isinstance(result.result, GafferError)
    assert "AUTOCOMMIT off" in str(result.result)
    assert effects(alias) == []


def test_a_lease_or_session_inside_the_block_is_refused_on_sqlite_at_once(
    app: Celery, alias: str
) -> None:
    """On SQLite Gaffer's own connection would wait for the block's write lock (30 s,
    then 'database is locked'); on PostgreSQL both are allowed."""

    @app.task(base=GafferTask, bind=True, shared=False, name="t.inner")
    def inner(self: GafferTask, what: str) -> None:
        with self.atomic():
            write(alias, what)
            if what == "lease":
                with self.lease("inner", ttl=30):
                    pass
            else:
                with self.session():
                    pass

    for what in ("lease", "session"):
        result = inner.apply(args=(what,))
        if alias == "lite":
            assert isinstance(result.result, GafferError), result.result
            assert "inside self.atomic() on SQLite" in str(result.result)
        else:
            assert result.successful(), result.result
    assert effects(alias) == ([] if alias == "lite" else ["lease", "session"])
