"""Statements built once per table prefix and reused with bound parameters.

A run of a GafferTask executes a handful of small statements. Building each one anew
(``insert(...).values(...)``) costs more Python time than the database takes to run it;
built once, with :func:`~sqlalchemy.bindparam` placeholders, a statement is only bound
and looked up in SQLAlchemy's compiled cache on each use.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any, TypeVar

from ..runtime import runtime

T = TypeVar("T")


class Prebuilt(dict[Hashable, Any]):
    """This process's prebuilt statements, by key."""


def prebuilt(key: Hashable, build: Callable[[], T]) -> T:
    """The statement cached under ``key`` (include the table prefix), built on first use."""
    built = runtime().part("prebuilt", Prebuilt)
    try:
        found: T = built[key]
        return found
    except KeyError:
        pass
    statement = build()
    with runtime().lock:
        return built.setdefault(key, statement)  # type: ignore[no-any-return]
