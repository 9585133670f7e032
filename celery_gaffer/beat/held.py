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
"""

from __future__ import annotations

import heapq
import itertools
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

    def __len__(self) -> int:
        return len(self._heap)

    def hold(
        self, fire: Fire, payload: Payload, send_at: datetime, claimed_until: datetime
    ) -> None:
        heapq.heappush(self._heap, _Held(send_at, next(self._seq), fire, payload, claimed_until))

    def next_at(self) -> datetime | None:
        """When the next held fire is to be sent (None: none held)."""
        return self._heap[0].send_at if self._heap else None

    def due(self, now: datetime) -> list[tuple[Fire, Payload]]:
        """Take the fires whose send time has come, each with its payload."""
        due: list[tuple[Fire, Payload]] = []
        while self._heap and self._heap[0].send_at <= now:
            held = heapq.heappop(self._heap)
            due.append((held.fire, held.payload))
        return due

    def drop(self, schedules: Iterable[str]) -> None:
        """Stop holding the fires of ``schedules`` (their claims run out; then any Beat
        deals with them from the ledger)."""
        names = set(schedules)
        kept = [held for held in self._heap if held.fire.schedule not in names]
        if len(kept) != len(self._heap):
            heapq.heapify(kept)
            self._heap = kept

    def sent(self, fires: list[Fire], at: datetime) -> None:
        """Fires published at ``at``, to be marked ``sent`` by :meth:`to_mark`."""
        if not fires:
            return
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
        if not self._unmarked:
            return []
        upcoming = self.next_at()
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
        if not self._unmarked:
            return None
        return max(0.0, self._unmarked_since + MARK_EVERY - self._monotonic())

    def release(self) -> list[tuple[int, datetime, datetime]]:
        """Every held fire as ``(id, send_at, claimed_until)``, no longer held."""
        claims = [(held.fire.id, held.send_at, held.claimed_until) for held in self._heap]
        self._heap.clear()
        return claims
