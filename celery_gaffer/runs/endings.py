"""Run ends written beside the worker, not in its way: one thread per process.

A worker's delivery ends with ``task_postrun``, and Celery acknowledges the message and
fetches the next one only once the receivers return. Recording the run's end there cost
the worker a database round trip per task (about 10% of a short task's time). So when
nothing waits on that write, ``task_postrun`` hands it to this process's
:class:`EndWriter`, whose thread writes the ends in the order they came while the
worker goes on to the next message: the record says ``running`` a moment longer.

The thread lets ends gather for :data:`LINGER` seconds after the first one comes, then
writes all that came: ends queued as :class:`Grouped` with the same group one after the
other are written together (one statement sent for all of them, in one round trip and
one transaction). A busy worker's thread thus wakes a few times a second, not once a
task: its CPU, and the time the task's thread waits for the interpreter lock while it
runs, are spread over many ends.

What a crash leaves is what it left before: a worker killed after a run's last write
and before its end record is written (now a moment later) leaves the row ``running``,
and Beat marks it ``lost`` when its heartbeat stops; the run's effect and its key are
already committed, so a redelivery is a ``duplicate``. Ends still queued when the
worker shuts down are written first, for up to :data:`CLOSE_TIMEOUT` seconds
(``worker_process_shutdown`` / ``worker_shutdown``, connected by
:func:`celery_gaffer.install`, and at exit for a cold shutdown). The run's heartbeat
goes on until its end is written: a queued end is not a lost run.

An end is written in the task's own thread, after the ends queued before it
(:meth:`EndWriter.write_in_order`, which does not wait out the linger), when something
waits on it: a run in the caller's process (eager or direct), a run that still holds
leases (the end record frees them, and the next run may need them now), a retry (its
fire is checked again), or when the queue is full (:data:`MAX_QUEUED`: the database is
slower than the worker) or closed.
"""

from __future__ import annotations

import atexit
import logging
import threading
from collections import deque
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from functools import partial
from itertools import groupby
from typing import Any

from ..exceptions import one_line
from ..runtime import runtime

logger = logging.getLogger("celery_gaffer.runs")

#: Ends queued at most; past this, ``task_postrun`` writes its own (back-pressure).
MAX_QUEUED = 1000
#: Seconds a shutdown waits for the queued ends to be written.
CLOSE_TIMEOUT = 10.0
#: Seconds the thread lets ends gather before it writes them (the longest an end record
#: waits for company; a shutdown or an end written in order cuts it short).
LINGER = 0.05

Write = Callable[[], None]


@dataclass(frozen=True, slots=True)
class Grouped:
    """An end that can be written together with others of its ``group``:
    ``write_all(items)`` writes the ``item`` of each of them (and logs its own failures);
    called alone, it writes its own."""

    group: Hashable
    item: Any
    write_all: Callable[[list[Any]], None]

    def __call__(self) -> None:
        self.write_all([self.item])


class EndWriter:
    """Writes run ends (each a callable that writes one and logs its own failure) in
    the order they were queued, on one daemon thread started on first use."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.queue: deque[Write] = deque()
        self.wake = threading.Condition(self.lock)
        # Set (under the lock) while an end that something waits on is queued, and at
        # close: the thread then writes without lingering.
        self.hurry = threading.Event()
        self.thread: threading.Thread | None = None
        self.closed = False
        self.writing = 0  # ends taken off the queue and being written

    def submit(self, write: Write, *, urgent: bool = False) -> bool:
        """Queue ``write`` (a callable, or a :class:`Grouped`); False when the caller must
        write it itself (queue full or closed). ``urgent``: written without lingering."""
        with self.lock:
            if self.closed or len(self.queue) >= MAX_QUEUED:
                return False
            if self.thread is None:
                thread = threading.Thread(target=self._run, name="gaffer-run-ends", daemon=True)
                thread.start()
                self.thread = thread
                # A process that exits without Celery's shutdown signals (a cold
                # shutdown) still writes what is queued.
                atexit.register(self.close)
            self.queue.append(write)
            if urgent:
                self.hurry.set()
            self.wake.notify()
        return True

    def write_in_order(self, write: Write) -> None:
        """Write ``write`` in the caller's thread once the ends queued before it are
        written: a run's end that something waits on never overtakes an earlier one
        (two ends of one schedule update its facts in the order the runs ended)."""
        with self.lock:
            idle = not self.queue and not self.writing
        if idle or self.closed:
            write()
            return
        done = threading.Event()

        def queued() -> None:
            try:
                write()
            finally:
                done.set()

        if not self.submit(queued, urgent=True):
            write()
            return
        done.wait()

    def close(self, timeout: float = CLOSE_TIMEOUT) -> bool:
        """Stop taking ends and wait up to ``timeout`` seconds for the queued ones to be
        written; True when none is left."""
        with self.lock:
            self.closed = True
            thread = self.thread
            self.hurry.set()
            self.wake.notify()
        if thread is not None:
            thread.join(timeout)
        with self.lock:
            left = len(self.queue) + self.writing
        if left:
            logger.warning(
                "%d run end records not written at shutdown (the database is slow or "
                "down); Beat marks those runs lost",
                left,
                extra={"action": "run_ends_unwritten", "count": left},
            )
        return not left

    def _run(self) -> None:
        while True:
            with self.lock:
                while not self.queue and not self.closed:
                    self.wake.wait()
                if not self.queue:
                    return  # closed, and everything written
            # Let more ends come: one write for many (cut short by hurry).
            self.hurry.wait(LINGER)
            with self.lock:
                ends = list(self.queue)
                self.queue.clear()
                self.hurry.clear()
                self.writing = len(ends)
            try:
                for write in _in_groups(ends):
                    _write_quietly(write)
            finally:
                with self.lock:
                    self.writing = 0


def _in_groups(ends: list[Write]) -> list[Write]:
    """``ends`` in their order, each run of :class:`Grouped` ends of one group next to
    each other made one write."""
    writes: list[Write] = []

    def group_of(end: Write) -> tuple[str, Hashable]:
        return ("group", end.group) if isinstance(end, Grouped) else ("alone", id(end))

    for _, side_by_side in groupby(ends, key=group_of):
        same = list(side_by_side)
        items = [end.item for end in same if isinstance(end, Grouped)]
        if len(items) > 1 and isinstance(same[0], Grouped):
            writes.append(partial(same[0].write_all, items))
        else:
            writes.extend(same)
    return writes


def _write_quietly(write: Write) -> None:
    try:
        write()
    except Exception as exc:  # noqa: BLE001 - each write logs its own; never stop
        logger.error(
            "writing a run end record failed: %s",
            one_line(exc),
            extra={"action": "run_record_failed"},
        )


def end_writer() -> EndWriter:
    """This process's end writer (a forked child gets its own, and its own thread)."""
    return runtime().part("end_writer", EndWriter)


def flush(**_: Any) -> None:
    """Write the ends queued in this process, and queue no more: a worker (or its pool
    process) is shutting down; later ends are written in the task's thread."""
    end_writer().close()
