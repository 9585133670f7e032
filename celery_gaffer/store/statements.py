"""Statements built once per table prefix and reused with bound parameters.

A run of a GafferTask executes a handful of small statements. Building each one anew
(``insert(...).values(...)``) costs more Python time than the database takes to run it;
built once, with :func:`~sqlalchemy.bindparam` placeholders, a statement is only bound
and looked up in SQLAlchemy's compiled cache on each use.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable
from typing import Any, TypeVar

T = TypeVar("T")

_built: dict[Hashable, Any] = {}
_lock = threading.Lock()


def prebuilt(key: Hashable, build: Callable[[], T]) -> T:
    """The statement cached under ``key`` (include the table prefix), built on first use."""
    try:
        found: T = _built[key]
        return found
    except KeyError:
        pass
    statement = build()
    with _lock:
        return _built.setdefault(key, statement)  # type: ignore[no-any-return]
