"""Jittered fires a Beat has claimed and publishes itself, each at its own send time.

A jittered fire is sent at its nominal time plus its jitter delay, so a busy second's
fires are due one after the other rather than together. Beat claims those due within
:data:`HOLD_AHEAD` in one transaction (inserted claimed when it decides them, or claimed
from the ledger: ``publish_after`` pushed past their send time by
``gaffer_republish_after``) and keeps them here. Each is then published when its time
comes, with no database round trip, and the sent ones are marked ``sent`` together.

If this Beat dies holding fires, any Beat publishes them once their ``publish_after``
passes (their idempotency key makes a repeat harmless). A Beat that stops cleanly gives
them back (:func:`~celery_gaffer.store.fires.unclaim`).

A running Beat sends them from a thread of its own (:mod:`.held_sender`), so that a tick
busy deciding the next second's fires cannot make this second's late. Every method of
:class:`HeldSends` is safe to call from both threads.
"""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from ..store.fires import Fire
from ..store.schedules import Payload

#: How far ahead of its send time a jittered fire is claimed and held.
HOLD_AHEAD = timedelta(seconds=1)
#: How long before the first unclaimed fire's send time Beat wakes to claim: every
#: claim then takes the next HOLD_AHEAD of sends, once per HOLD_AHEAD - CLAIM_AHEAD.
CLAIM_AHEAD = HOLD_AHEAD / 2
#: Shortest wait between two wake-ups for held sends: each wake-up then publishes the
#: sends due by then in one broker batch (one round trip), at most this late.
SEND_EVERY = 0.01
#: Longest a sent fire waits to be marked ``sent`` while more sends follow closely.
MARK_EVERY = 0.2
#: Sent fires marked in one transaction at most (then marked at once).
MARK_BATCH = 250
#: A send this close behind the last one lets its marking wait (and share a transaction).
FOLLOWS_CLOSELY = timedelta(milliseconds=50)


@dataclass(order=True, slots=True)
class _Held:
    send_at: datetime
    seq: int
    fire: Fire = field(compare=False)
    payload: Payload = field(compare=False)
    claimed_until: datetime = field(compare=False)


class Guard:
    """A reentrant lock with its condition, that knows whether this thread holds it.

    Used as ``with guard:``, with :meth:`wait` and :meth:`notify_all` as a
    :class:`threading.Condition`'s. :meth:`held_here` errs towards True: it says so from
    just before the lock is taken until just after it is given back.
    """

    def __init__(self) -> None:
        self._condition = threading.Condition(threading.RLock())
        self._depth = threading.local()

    def __enter__(self) -> Guard:
        self._depth.count = getattr(self._depth, "count", 0) + 1
        self._condition.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self._condition.release()
        self._depth.count -= 1

    def wait(self, timeout: float) -> bool:
        return self._condition.wait(timeout)

    def notify_all(self) -> None:
        self._condition.notify_all()

    def held_here(self) -> bool:
        """Whether this thread holds the lock (or is about to take or give it back)."""
        return getattr(self._depth, "count", 0) > 0


class HeldSends:
    """The fires one Beat holds, by send time, and those sent but not yet marked."""

    def __init__(self, monotonic: Callable[[], float] = time.monotonic) -> None:
        self._monotonic = monotonic
        self._heap: list[_Held] = []
        self._seq = itertools.count()
        #: Sent fires not marked yet, by the time they were sent.
        self._unmarked: list[tuple[datetime, list[Fire]]] = []
        self._unmarked_count = 0
        self._unmarked_since = 0.0  # monotonic time of the oldest unmarked send
        #: Guards all of the above; notified when an earlier send is held, or on stop.
        self.changed = Guard()

    def __len__(self) -> int:
        with self.changed:
            return len(self._heap)

    def hold(
        self, fire: Fire, payload: Payload, send_at: datetime, claimed_until: datetime
    ) -> None:
        held = _Held(send_at, next(self._seq), fire, payload, claimed_until)
        with self.changed:
            heapq.heappush(self._heap, held)
            if self._heap[0] is held:
                self.changed.notify_all()

    def next_at(self) -> datetime | None:
        """When the next held fire is to be sent (None: none held)."""
        with self.changed:
            return self._heap[0].send_at if self._heap else None

    def due(self, now: datetime) -> list[tuple[Fire, Payload]]:
        """Take the fires whose send time has come, each with its payload."""
        due: list[tuple[Fire, Payload]] = []
        with self.changed:
            while self._heap and self._heap[0].send_at <= now:
                held = heapq.heappop(self._heap)
                due.append((held.fire, held.payload))
        return due

    def drop(self, schedules: Iterable[str]) -> None:
        """Stop holding the fires of ``schedules`` (their claims run out; then any Beat
        deals with them from the ledger)."""
        names = set(schedules)
        with self.changed:
            kept = [held for held in self._heap if held.fire.schedule not in names]
            if len(kept) != len(self._heap):
                heapq.heapify(kept)
                self._heap = kept

    def sent(self, fires: list[Fire], at: datetime) -> None:
        """Fires published at ``at``, to be marked ``sent`` by :meth:`to_mark`."""
        if not fires:
            return
        with self.changed:
            if not self._unmarked:
                self._unmarked_since = self._monotonic()
            self._unmarked.append((at, fires))
            self._unmarked_count += len(fires)

    def to_mark(self, now: datetime, *, force: bool = False) -> list[tuple[datetime, list[Fire]]]:
        """The sent fires to mark now, by send time (taken: :meth:`sent` them again if
        marking fails).

        Marking waits while the next send follows within :data:`FOLLOWS_CLOSELY`, for
        at most :data:`MARK_EVERY` seconds or :data:`MARK_BATCH` fires (``force``: no
        waiting).
        """
        with self.changed:
            if not self._unmarked:
                return []
            upcoming = self._heap[0].send_at if self._heap else None
            waiting = (
                not force
                and upcoming is not None
                and upcoming - now <= FOLLOWS_CLOSELY
                and self._unmarked_count < MARK_BATCH
                and self._monotonic() - self._unmarked_since < MARK_EVERY
            )
            if waiting:
                return []
            taken, self._unmarked, self._unmarked_count = self._unmarked, [], 0
            return taken

    def mark_in(self) -> float | None:
        """Seconds until the unmarked fires must be marked (None: none unmarked)."""
        with self.changed:
            if not self._unmarked:
                return None
            return max(0.0, self._unmarked_since + MARK_EVERY - self._monotonic())

    def wait_in(self, now: datetime, *, marks: bool = True) -> float | None:
        """Seconds until a held send or (``marks``) a marking is due (None: neither): at
        least :data:`SEND_EVERY` to the next send, so that close sends share a broker
        batch."""
        send_at, mark_in = self.next_at(), self.mark_in() if marks else None
        waits = [] if mark_in is None else [mark_in]
        if send_at is not None:
            waits.append(max((send_at - now).total_seconds(), SEND_EVERY))
        return min(waits) if waits else None

    def marking_in(self, now: datetime) -> float | None:
        """Seconds until a marking is due, counting each held send as marked
        :data:`MARK_EVERY` after it (None: nothing held or unmarked). For the tick,
        when a thread sends; a send overdue still waits a marking's time (no spin)."""
        send_at, mark_in = self.next_at(), self.mark_in()
        if send_at is None:
            return mark_in
        sent_in = max((send_at - now).total_seconds(), 0.0) + MARK_EVERY
        return sent_in if mark_in is None else min(mark_in, sent_in)

    def release(self) -> list[tuple[int, datetime, datetime]]:
        """Every held fire as ``(id, send_at, claimed_until)``, no longer held."""
        with self.changed:
            claims = [(held.fire.id, held.send_at, held.claimed_until) for held in self._heap]
            self._heap.clear()
            return claims
