"""A survey's rows are read by a thread a few batches ahead of ``status``: every row in
order, an error raised in the consumer, and an early stop ends the thread."""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterator

import pytest

from celery_gaffer.beat.survey import Prefetched


def test_every_row_arrives_in_order_and_the_thread_ends() -> None:
    rows = Prefetched(iter(range(10 * Prefetched.BATCH + 3)))
    assert list(rows) == list(range(10 * Prefetched.BATCH + 3))
    rows.stop()
    assert not [t for t in threading.enumerate() if t.name == "gaffer-survey"]


def test_an_error_while_reading_is_raised_in_the_consumer_after_the_rows_before_it() -> None:
    def failing() -> Iterator[int]:
        yield from range(5)
        raise RuntimeError("the connection was lost")

    rows = Prefetched(failing())
    seen = []
    with pytest.raises(RuntimeError, match="the connection was lost"):
        seen.extend(rows)
    rows.stop()
    assert seen == [0, 1, 2, 3, 4]


def test_stopping_early_ends_the_thread_and_reads_a_bounded_number_of_rows_ahead() -> None:
    read = itertools.count()
    endless = (next(read) for _ in itertools.count())
    rows = Prefetched(endless)
    assert list(itertools.islice(iter(rows), 3)) == [0, 1, 2]
    rows.stop()
    assert not [t for t in threading.enumerate() if t.name == "gaffer-survey"]
    # At most the batches the queue holds, the one handed over, and the one in hand.
    assert next(read) <= (Prefetched.AHEAD + 3) * Prefetched.BATCH


def test_stopping_before_reading_starts_nothing() -> None:
    rows = Prefetched(iter([1, 2]))
    rows.stop()
    assert not [t for t in threading.enumerate() if t.name == "gaffer-survey"]
