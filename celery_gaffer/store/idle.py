"""Connections of the autocommit pools kept checked out between uses.

A run of a GafferTask makes up to five single-statement round trips on the autocommit
pools (run start, lease acquire, lease release, run end, plus heartbeats and renewals
from their threads). Checking a connection out of SQLAlchemy's pool and back in costs
about 100 µs of CPU each time, more than the statement itself on a local database. So
each autocommit engine keeps a few idle :class:`~sqlalchemy.engine.Connection` objects
on a stack and hands them out again as they are: an autocommit connection holds no
transaction between statements, so nothing of one use leaks into the next.

A connection that saw any error is closed (back to the pool, which decides what to do
with it) rather than kept. When SQLAlchemy finds the database gone (a restart), it
discards its pool, and :class:`Held` drops its idle connections too, so that each of
them does not fail once on its next use.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import Connection, Engine, event

#: Idle connections kept per engine (more are returned to the pool).
MAX_IDLE = 4


class Held:
    """The idle connections of one autocommit engine."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.idle: list[Connection] = []
        self.lock = threading.Lock()
        self.generation = 0
        event.listen(engine, "handle_error", self._on_error)

    @contextmanager
    def connection(self) -> Iterator[Connection]:
        """An autocommit connection, put back on the stack if its use raised nothing."""
        with self.lock:
            conn = self.idle.pop() if self.idle else None
            generation = self.generation
        if conn is None:
            conn = self.engine.connect()
        try:
            yield conn
        except BaseException:
            conn.close()
            raise
        if conn.invalidated:
            conn.close()
            return
        if conn.in_transaction():
            # SQLAlchemy's own marker of the autobegun block: the database itself has no
            # transaction open (each statement committed), so this sends nothing.
            try:
                conn.rollback()
            except Exception:  # noqa: BLE001 - the statements are done; just don't keep it
                conn.close()
                return
        with self.lock:
            if generation == self.generation and len(self.idle) < MAX_IDLE:
                self.idle.append(conn)
                return
        conn.close()

    def drop(self, *, close: bool = True) -> None:
        """Forget the idle connections (``close``: return them to the pool first)."""
        with self.lock:
            idle, self.idle = self.idle, []
            self.generation += 1
        if close:
            for conn in idle:
                conn.close()

    def _on_error(self, context: Any) -> None:
        if context.is_disconnect:
            # The pool is being discarded; the idle connections belong to it.
            self.drop()
