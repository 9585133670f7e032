"""The lease renewer: one daemon thread per process renewing every held lease."""

from __future__ import annotations

import logging
import threading
import time

from ..exceptions import one_line
from ..runtime import runtime
from .leases import Lease

logger = logging.getLogger("celery_gaffer.leases")


class Renewer:
    """Renews leases at a third of their TTL in one daemon thread per process.

    A lease whose renewal finds its fence stale is marked ``lost``; the run then stops
    at its next check or commit with :class:`FenceLost`. Shared by every run of the
    process (:func:`renewer`), so that a run does not start and join a thread.
    """

    def __init__(self) -> None:
        self._due: dict[Lease, float] = {}  # lease -> monotonic time of its next renewal
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._sleeping_until = 0.0  # monotonic time the thread's current wait ends

    def add(self, lease: Lease) -> None:
        with self._lock:
            due = self._due[lease] = time.monotonic() + lease.ttl / 3
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="gaffer-lease-renewer", daemon=True
                )
                self._thread.start()
            # Wake the thread only if this lease is due before its current wait ends
            # (a shorter TTL); waking it for every run would cost each run a thread
            # switch.
            early = due < self._sleeping_until
        if early:
            self._wake.set()

    def discard(self, lease: Lease) -> None:
        with self._lock:
            self._due.pop(lease, None)

    def _run(self) -> None:
        while True:
            self._wake.clear()  # before the wait is computed: a later add() wakes it
            now = time.monotonic()
            with self._lock:
                todo = [lease for lease, when in self._due.items() if when <= now]
                for lease in todo:
                    self._due[lease] = now + lease.ttl / 3
            for lease in todo:
                if lease.lost:
                    continue
                try:
                    lease.client.renew(lease)
                except Exception as exc:  # noqa: BLE001 - a failed renewal must not kill the thread
                    _note_renewal_error(lease, exc)
            with self._lock:
                # Leases added meanwhile are in the map: none sleeps past its renewal.
                live = [when for lease, when in self._due.items() if not lease.lost]
                self._sleeping_until = min(live, default=now + 60.0)
            self._wake.wait(max(0.0, self._sleeping_until - time.monotonic()))


def renewer() -> Renewer:
    """This process's renewer (a forked child gets its own, and its own thread)."""
    return runtime().part("renewer", Renewer)


def _note_renewal_error(lease: Lease, exc: BaseException) -> None:
    logger.warning(
        "could not renew lease %s (fence %d); retrying: %s",
        lease.name,
        lease.token,
        one_line(exc),
        extra={"action": "lease_renew_failed", "lease": lease.name},
    )
