"""What one process keeps for celery-gaffer, in one place: :func:`runtime`.

Engines and their idle connections, prebuilt statements, session factories, the
lease renewer and the run heartbeat are per process: a forked child (Celery's prefork
pool) must not use its parent's sockets or threads. Each layer keeps its part here,
made on first use (nothing happens at import), instead of in a module-level cache with
a lock and a fork check of its own. A new process id means a forked child:
:meth:`Runtime.reset_after_fork` then lets go of everything inherited, without closing
the parent's sockets, and each part is made again on its next use.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

T = TypeVar("T")


class Part(Protocol):
    """A part that holds sockets or threads: told when the process it was made in forked."""

    def after_fork(self) -> None: ...


class Runtime:
    """The per-process state of celery-gaffer (see the module)."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.lock = threading.RLock()
        self._parts: dict[str, Any] = {}

    def part(self, name: str, factory: Callable[[], T]) -> T:
        """The part ``name`` of this process, made by ``factory`` on first use."""
        try:
            found: T = self._parts[name]
            return found
        except KeyError:
            pass
        with self.lock:
            if name not in self._parts:
                self._parts[name] = factory()
            made: T = self._parts[name]
            return made

    def reset_after_fork(self) -> None:
        """Forget every part, leaving inherited sockets and threads to the parent."""
        with self.lock:
            parts, self._parts = self._parts, {}
        for part in parts.values():
            after_fork = getattr(part, "after_fork", None)
            if after_fork is not None:
                after_fork()


_current = Runtime()
_current_lock = threading.Lock()


def runtime() -> Runtime:
    """This process's runtime (a forked child's first call starts its own)."""
    global _current
    current = _current
    if current.pid == os.getpid():
        return current
    with _current_lock:
        if _current.pid != os.getpid():
            inherited, _current = _current, Runtime()
            inherited.reset_after_fork()
        return _current


def reset_after_fork() -> None:
    """Start this process's runtime afresh, as a forked child must (``worker_process_init``)."""
    global _current
    with _current_lock:
        inherited, _current = _current, Runtime()
    inherited.reset_after_fork()
