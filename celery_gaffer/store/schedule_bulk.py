"""A bulk load of schedule rows (``ScheduleStore.add_many``): ``COPY`` on PostgreSQL."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from operator import itemgetter
from typing import Any

from sqlalchemy import Connection
from sqlalchemy.exc import NotSupportedError

from ..exceptions import GafferError
from . import copying
from .models import Models, table_of
from .schedules import insert_schedules


def bulk_insert_schedules(
    conn: Connection,
    models: Models,
    rows: Sequence[dict[str, Any]],
    *,
    alongside: Callable[[], None] | None = None,
) -> None:
    """:func:`insert_schedules` for a bulk load: on PostgreSQL with psycopg the rows are
    streamed with ``COPY`` (:func:`~.copying.copy_rows`), at what the server's own
    loading costs rather than a bound statement per row. A JSON column's value may be
    its text already (:class:`~.copying.JSONText`).

    Where ``COPY`` is refused (a table under row-level security), the chunk is inserted
    the plain way instead, from a savepoint; a repeated name raises IntegrityError either
    way.

    ``alongside`` is called after each row is handed to ``COPY`` (fewer times, or not at
    all, on other paths): the caller's work in it overlaps the server's on the rows
    already sent. It must not raise.
    """
    if not rows:
        return
    if not copying.copies(conn):
        insert_schedules(conn, models, _decoded(rows))
        return
    try:
        with conn.begin_nested():
            copying.copy_rows(conn, table_of(models.Schedule), _NAMES, _values(rows, alongside))
    except NotSupportedError:
        insert_schedules(conn, models, _decoded(rows))


def _decoded(rows: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """``rows`` with JSON columns given as text (:class:`~.copying.JSONText`) decoded, for
    a plain insert."""
    return [{name: copying.decoded(value) for name, value in row.items()} for row in rows]


def _values(
    rows: Iterable[dict[str, Any]], alongside: Callable[[], None] | None
) -> Iterator[Sequence[Any]]:
    for row in rows:
        yield _ordered({**_BLANK_ROW, **row})
        if alongside is not None:
            alongside()


class ChunkRows:
    """Up to ``size`` entries read from ``entries`` and made into rows by ``build``, one
    entry per :meth:`step` (so that the work can go on while the chunk before is written)
    and the rest by :meth:`validated`.

    ``first`` is the position of the chunk's first entry in the whole load, and how many
    entries were written before it (the chunks before it are written first).
    """

    __slots__ = ("_build", "_done", "_entries", "_failure", "_first", "_size", "rows")

    def __init__(
        self,
        entries: Iterator[Any],
        size: int,
        first: int,
        build: Callable[[Any], dict[str, Any]],
    ) -> None:
        self._entries = entries
        self._size = size
        self._first = first
        self._build = build
        self._done = False
        # The position of the entry that failed (None: reading failed) and the error.
        self._failure: tuple[int | None, Exception] | None = None
        #: The rows built so far, in the order of the entries.
        self.rows: list[dict[str, Any]] = []

    def step(self) -> None:
        """Read and build the next entry; a failure (of either) is kept for
        :meth:`validated` to raise, and ends the chunk."""
        at = len(self.rows)
        if self._done or at >= self._size:
            self._done = True
            return
        try:
            entry = next(self._entries)
        except StopIteration:
            self._done = True
            return
        except Exception as exc:  # noqa: BLE001 - kept, raised by validated()
            self._done, self._failure = True, (None, exc)
            return
        try:
            self.rows.append(self._build(entry))
        except Exception as exc:  # noqa: BLE001 - kept, raised by validated()
            self._done, self._failure = True, (self._first + at, exc)

    def validated(self) -> list[dict[str, Any]]:
        """Every entry's row (none: no entry was left); else the first failure: the
        iterator's own error, or a GafferError naming the bad entry's position and how
        many were written before it."""
        while not self._done:
            self.step()
        if self._failure is None:
            return self.rows
        position, exc = self._failure
        if position is not None and isinstance(exc, GafferError):
            raise type(exc)(
                f"entry {position}: {exc} ({self._first} schedules were added before it)",
                field=exc.field,
            ) from exc
        raise exc


# Every column a new schedule row has (its id is generated), with its type.
_INSERT_COLUMNS = (
    ("name", "str"),
    ("task", "str"),
    ("schedule", "text"),
    ("args", "text"),
    ("kwargs", "text"),
    ("options", "text"),
    ("catchup", "str"),
    ("starting_deadline", "float"),
    ("overlap", "str"),
    ("grace", "float"),
    ("enabled", "bool"),
    ("source", "str"),
    ("watermark_at", "datetime"),
    ("next_fire_at", "datetime"),
    ("error", "text"),
    ("start_at", "datetime"),
    ("end_at", "datetime"),
    ("max_runs", "int"),
    ("fired_count", "int"),
    ("ping_url", "str"),
    ("skip_on", "text"),
    ("on_skip", "str"),
    ("health", "str"),
    ("check_at", "datetime"),
    ("consecutive_failures", "int"),
    ("last_success_at", "datetime"),
    ("last_success_nominal_at", "datetime"),
    ("paused_note", "text"),
    ("paused_until", "datetime"),
    ("created_at", "datetime"),
    ("updated_at", "datetime"),
)
_NAMES = tuple(name for name, _ in _INSERT_COLUMNS)
# The values of the columns a row may leave out (the models' defaults).
_INSERT_DEFAULTS: dict[str, Any] = {
    "catchup": "latest",
    "overlap": "allow",
    "enabled": True,
    "source": "db",
    "fired_count": 0,
    "health": "ok",
    "consecutive_failures": 0,
}
# Every column, with the value of a row that leaves it out (the model's default, or NULL).
_BLANK_ROW = {name: _INSERT_DEFAULTS.get(name) for name in _NAMES}
# A complete row's values in the order of _NAMES.
_ordered = itemgetter(*_NAMES)

__all__ = ["ChunkRows", "bulk_insert_schedules"]
