"""What a delivery that did no work tells Flower, and when it leaves Celery's path alone.

A real Celery task with a request pushed as the worker would; its event sender and
result backend record what they are given.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest
from celery import Celery, signals
from celery.exceptions import Ignore

from celery_gaffer.runs.flower import announce, progress_fields


class Recorder:
    def __init__(self, *, fail: bool = False) -> None:
        self.events: list[tuple[str, dict[str, Any]]] = []
        self.stored: list[tuple[str, Any, bool]] = []
        self.fail = fail

    def send_event(self, type_: str, **fields: Any) -> None:
        if self.fail:
            raise ConnectionError("broker unreachable")
        self.events.append((type_, fields))

    def mark_as_done(self, task_id: str, result: Any, request: Any, store: bool) -> None:
        self.stored.append((task_id, result, store))


@pytest.fixture
def apps() -> Iterator[list[Celery]]:
    made: list[Celery] = []
    yield made
    for app in made:
        app.close()


def delivered(
    apps: list[Celery], recorder: Recorder, *, on_success: bool = False, **request: Any
) -> Any:
    """A task of a new app, in a worker's delivery with ``request`` fields."""
    app = Celery("flower-unit", broker="memory://", set_as_current=False)
    apps.append(app)

    class Base(app.Task):  # type: ignore[name-defined,misc]
        ignore_result = request.pop("task_ignores_result", False)

    if on_success:
        Base.on_success = lambda self, *args: None

    @app.task(base=Base, bind=True, name="t.settle", shared=False)
    def settle(self: Any, invoice_id: int) -> None:
        return None

    settle.send_event = recorder.send_event
    settle.backend = recorder
    # As Celery's tracer pushes it (Context's default says "called directly").
    settle.push_request(**{"id": "task-1", "hostname": "w1", "called_directly": False, **request})
    return settle


def test_a_worker_delivery_ends_with_its_own_event_a_stored_none_and_ignore(
    apps: list[Celery],
) -> None:
    recorder = Recorder()
    task = delivered(apps, recorder)
    with pytest.raises(Ignore):
        announce(task, "duplicate", "key k:1 was completed by an earlier run", key="k:1")
    assert recorder.events == [
        (
            "task-duplicate",
            {
                "result": "duplicate: key k:1 was completed by an earlier run",
                "gaffer_outcome": "duplicate",
                "gaffer_key": "k:1",
                "gaffer_reason": "key k:1 was completed by an earlier run",
            },
        )
    ]
    assert recorder.stored == [("task-1", None, True)]


@pytest.mark.parametrize(
    "request_fields",
    [
        {"is_eager": True},
        {"called_directly": True},
        {"chain": [{"task": "t.next"}]},
        {"callbacks": [{"task": "t.next"}]},
        {"chord": {"task": "t.body"}},
    ],
)
def test_eager_direct_and_workflow_deliveries_keep_celerys_success_path(
    apps: list[Celery], request_fields: dict[str, Any]
) -> None:
    recorder = Recorder()
    task = delivered(apps, recorder, **request_fields)
    announce(task, "skipped", "lease l is held", key=None)
    assert (recorder.events, recorder.stored) == ([], [])


def test_success_handlers_and_receivers_still_run(apps: list[Celery]) -> None:
    recorder = Recorder()
    announce(delivered(apps, recorder, on_success=True), "duplicate", "why", key="k")
    assert recorder.events == []

    def receiver(**_: Any) -> None:
        return None

    signals.task_success.connect(receiver, weak=False)
    try:
        announce(delivered(apps, recorder), "duplicate", "why", key="k")
    finally:
        signals.task_success.disconnect(receiver)
    assert recorder.events == []


def test_the_message_decides_whether_the_result_is_stored(apps: list[Celery]) -> None:
    recorder = Recorder()
    task = delivered(apps, recorder, task_ignores_result=True, ignore_result=False)
    with pytest.raises(Ignore):
        announce(task, "duplicate", "why", key="k")
    assert recorder.stored == [("task-1", None, True)]
    recorder = Recorder()
    with pytest.raises(Ignore):
        announce(delivered(apps, recorder, task_ignores_result=True), "duplicate", "w", key="k")
    assert recorder.stored == [("task-1", None, False)]


def test_an_event_that_cannot_be_sent_leaves_one_warning_and_celerys_path(
    apps: list[Celery], caplog: pytest.LogCaptureFixture
) -> None:
    recorder = Recorder(fail=True)
    with caplog.at_level(logging.WARNING, logger="celery_gaffer"):
        announce(delivered(apps, recorder), "duplicate", "why", key="k")
    assert recorder.stored == []
    assert [r.getMessage() for r in caplog.records] == [
        "t.settle[task-1] ended duplicate, but Flower will show SUCCESS: "
        "ConnectionError: broker unreachable"
    ]
    assert caplog.records[0].exc_info is None


def test_progress_reads_as_numbers_unless_given_a_result() -> None:
    assert progress_fields({"processed": 300, "cursor": 300, "batches": 3}) == {
        "processed": 300,
        "cursor": 300,
        "batches": 3,
        "result": "processed 300, cursor 300, batches 3",
    }
    assert progress_fields({"done": 1, "result": "mine"}) == {"done": 1, "result": "mine"}
