"""The run-end writer's thread: order, back-pressure, shutdown, failures (no database:
each end is a callable, as task_postrun hands it over)."""

from __future__ import annotations

import logging
import threading

import pytest

from celery_gaffer.runs import endings
from celery_gaffer.runs.endings import EndWriter

WAIT = 10.0  # seconds a test waits for the writer's thread at most (it only lingers 50 ms)


def test_ends_are_written_in_the_order_they_came_on_one_thread() -> None:
    writer = EndWriter()
    written: list[tuple[int, str]] = []
    for n in range(200):
        assert writer.submit(lambda n=n: written.append((n, threading.current_thread().name)))
    assert writer.close(WAIT)
    assert [n for n, _ in written] == list(range(200))
    assert {name for _, name in written} == {"gaffer-run-ends"}


def test_a_full_queue_and_a_closed_writer_hand_the_end_back_to_the_caller(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(endings, "MAX_QUEUED", 2)
    writer = EndWriter()
    release = threading.Event()
    started = threading.Event()

    def blocked() -> None:
        started.set()
        release.wait(WAIT)

    assert writer.submit(blocked)
    assert started.wait(WAIT)  # taken off the queue: it is being written
    assert writer.submit(lambda: None)
    assert writer.submit(lambda: None)
    assert not writer.submit(lambda: None)  # two queued: the caller writes its own
    release.set()
    assert writer.close(WAIT)
    assert not writer.submit(lambda: None)


def test_close_writes_what_was_queued_before_it_returns() -> None:
    writer = EndWriter()
    gate = threading.Event()
    written: list[int] = []
    writer.submit(lambda: gate.wait(WAIT))
    for n in range(5):
        writer.submit(lambda n=n: written.append(n))
    threading.Timer(0.2, gate.set).start()
    assert writer.close(WAIT)
    assert written == [0, 1, 2, 3, 4]


def test_close_says_in_one_line_how_many_ends_were_not_written(
    caplog: pytest.LogCaptureFixture,
) -> None:
    writer = EndWriter()
    gate = threading.Event()
    started = threading.Event()
    writer.submit(lambda: (started.set(), gate.wait(WAIT)))
    writer.submit(lambda: None)
    assert started.wait(WAIT)
    record = closed_too_soon(writer, gate, caplog)
    assert record.getMessage().startswith("2 run end records not written at shutdown")
    assert record.exc_info is None


def closed_too_soon(
    writer: EndWriter, gate: threading.Event, caplog: pytest.LogCaptureFixture
) -> logging.LogRecord:
    """Close ``writer`` while its thread waits for ``gate``; the one line it logged."""
    with caplog.at_level(logging.WARNING, logger="celery_gaffer.runs"):
        assert not writer.close(timeout=0.05)
    gate.set()
    (record,) = [r for r in caplog.records if r.name == "celery_gaffer.runs"]
    return record


def test_a_failing_end_is_one_line_and_the_next_is_still_written(
    caplog: pytest.LogCaptureFixture,
) -> None:
    writer = EndWriter()
    written: list[str] = []

    def broken() -> None:
        raise RuntimeError("boom\nsecond line")

    with caplog.at_level(logging.ERROR, logger="celery_gaffer.runs"):
        writer.submit(broken)
        writer.submit(lambda: written.append("next"))
        assert writer.close(WAIT)
    assert written == ["next"]
    (record,) = caplog.records
    assert record.getMessage() == "writing a run end record failed: RuntimeError: boom second line"
    assert record.exc_info is None


def test_a_writer_with_nothing_queued_starts_no_thread_and_closes_at_once() -> None:
    writer = EndWriter()
    assert writer.close(WAIT)
    assert writer.thread is None


def test_an_end_written_in_order_waits_for_the_ends_queued_before_it() -> None:
    writer = EndWriter()
    gate = threading.Event()
    written: list[str] = []
    writer.submit(lambda: (gate.wait(WAIT), written.append("queued first")))
    writer.submit(lambda: written.append("queued second"))
    threading.Timer(0.2, gate.set).start()
    writer.write_in_order(lambda: written.append("in order"))
    assert written == ["queued first", "queued second", "in order"]
    assert writer.close(WAIT)


def test_an_end_written_in_order_with_nothing_queued_is_written_in_the_callers_thread() -> None:
    writer = EndWriter()
    threads: list[str] = []
    writer.write_in_order(lambda: threads.append(threading.current_thread().name))
    assert threads == [threading.current_thread().name]
    assert writer.thread is None


def grouped(group: str, item: int, calls: list[tuple[str, list[int]]]) -> endings.Grouped:
    return endings.Grouped(group, item, lambda items: calls.append((group, list(items))))


def test_grouped_ends_queued_side_by_side_are_written_together_in_their_order() -> None:
    writer = EndWriter()
    gate = threading.Event()
    started = threading.Event()
    calls: list[tuple[str, list[int]]] = []
    writer.submit(lambda: (started.set(), gate.wait(WAIT)))
    assert started.wait(WAIT)  # being written: everything below queues up behind it
    for item in (1, 2, 3):
        writer.submit(grouped("a", item, calls))
    writer.submit(grouped("b", 4, calls))
    writer.submit(lambda: calls.append(("plain", [])))
    for item in (5, 6):
        writer.submit(grouped("a", item, calls))
    gate.set()
    assert writer.close(WAIT)
    assert calls == [("a", [1, 2, 3]), ("b", [4]), ("plain", []), ("a", [5, 6])]


def test_a_grouped_end_alone_writes_its_own_item() -> None:
    calls: list[tuple[str, list[int]]] = []
    grouped("a", 7, calls)()
    assert calls == [("a", [7])]


def test_the_thread_lets_ends_gather_but_an_end_written_in_order_does_not_wait_for_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(endings, "LINGER", 3600.0)  # gathering would outlast the test
    writer = EndWriter()
    calls: list[tuple[str, list[int]]] = []
    writer.submit(grouped("a", 1, calls))
    writer.submit(grouped("a", 2, calls))
    assert calls == []  # still gathering
    done = threading.Event()
    threading.Thread(
        target=lambda: (writer.write_in_order(lambda: calls.append(("in order", []))), done.set()),
        daemon=True,
    ).start()
    assert done.wait(WAIT)
    assert calls == [("a", [1, 2]), ("in order", [])]
    writer.submit(grouped("a", 3, calls))
    assert writer.close(WAIT)  # a shutdown does not wait for the gathering either
    assert calls[-1] == ("a", [3])


def test_close_counts_every_end_of_a_group_being_written_as_not_written(
    caplog: pytest.LogCaptureFixture,
) -> None:
    writer = EndWriter()
    gate = threading.Event()
    started = threading.Event()

    def slow(items: list[int]) -> None:
        started.set()
        gate.wait(WAIT)

    for item in range(3):
        writer.submit(endings.Grouped("a", item, slow))
    writer.hurry.set()
    assert started.wait(WAIT)
    record = closed_too_soon(writer, gate, caplog)
    assert record.getMessage().startswith("3 run end records not written at shutdown")
