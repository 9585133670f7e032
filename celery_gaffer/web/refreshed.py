"""A value the console keeps a while (:class:`Refreshed`): the overview's zones and
counts, read again in the background once they are older than their time to live."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Generic, TypeVar

from sqlalchemy.exc import SQLAlchemyError

from ..exceptions import GafferError, one_line
from .console import Console

logger = logging.getLogger("celery_gaffer.web")

T = TypeVar("T")


class Refreshed(Generic[T]):
    """A value read by ``load`` and kept ``ttl`` seconds. Once it is older, the next
    :meth:`get` starts reading it again on a thread of its own and answers the kept
    value meanwhile: only the first read is waited for. A read again that fails keeps
    the old value and is not tried again until ``ttl`` has passed once more (so a
    database that is down is not asked on every request). ``background=False`` reads it
    again within :meth:`get` instead."""

    def __init__(
        self,
        load: Callable[[Console, datetime], T],
        ttl: float,
        *,
        background: bool = True,
        spawn: Callable[[Callable[[], None]], threading.Thread] | None = None,
    ) -> None:
        self._load = load
        self._spawn = spawn or _spawn
        self._ttl = timedelta(seconds=ttl)
        self._background = background
        self._lock = threading.Lock()
        self._kept: tuple[datetime, T] | None = None
        self._reading: threading.Thread | None = None
        #: After a failed read again: no other before this console time.
        self._retry_at: datetime | None = None

    def get(self, console: Console, now: datetime) -> tuple[T, datetime]:
        """The value and the console time it was read at."""
        with self._lock:
            kept = self._kept
            if kept is not None:
                if now - kept[0] < self._ttl or self._reading is not None:
                    return kept[1], kept[0]
                if self._retry_at is not None and now < self._retry_at:
                    return kept[1], kept[0]
                if self._background:
                    # Marked as reading once started: a thread that cannot start
                    # (RuntimeError) leaves nothing marked, and the next get tries again.
                    self._reading = self._spawn(lambda: self._read_again(console, now))
                    return kept[1], kept[0]
        value = self._load(console, now)
        with self._lock:
            self._kept = (now, value)
            self._retry_at = None
        return value, now

    @property
    def ready(self) -> bool:
        """Whether a value has been read (the next :meth:`get` answers at once)."""
        with self._lock:
            return self._kept is not None

    def wait(self) -> None:
        """Until a reading started by :meth:`get` is done."""
        reading = self._reading
        if reading is not None:
            reading.join()

    def _read_again(self, console: Console, now: datetime) -> None:
        try:
            value = self._load(console, now)
        except (GafferError, SQLAlchemyError) as exc:
            # Handled: one line, no traceback; the kept value is answered meanwhile.
            self._failed(now)
            logger.warning(
                "overview: reading again failed, the last value is kept: %s",
                one_line(exc),
                extra={"action": "web_overview_read"},
            )
            return
        except Exception:  # a bug: its traceback is wanted
            self._failed(now)
            logger.exception(
                "overview: reading again failed", extra={"action": "web_overview_read"}
            )
            return
        with self._lock:
            self._kept = (now, value)
            self._retry_at = None
            self._reading = None

    def _failed(self, now: datetime) -> None:
        with self._lock:
            self._retry_at = now + self._ttl
            self._reading = None


def _spawn(target: Callable[[], None]) -> threading.Thread:
    """A started daemon thread running ``target``."""
    thread = threading.Thread(target=target, name="gaffer-overview-read", daemon=True)
    thread.start()
    return thread
