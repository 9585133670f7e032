"""``db_now(offset)``: the database's clock, plus an offset in seconds, as SQL.

Lease expiry is decided by the database's clock, never a worker's, so that two workers
whose clocks disagree still agree on who holds a lease. PostgreSQL's ``clock_timestamp()``
is the wall clock at the statement (``now()`` would be the transaction's start).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import BindParameter, bindparam
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.expression import ColumnElement, FunctionElement
from sqlalchemy.types import Float

from .types import UTCDateTime


class db_now(FunctionElement[Any]):
    """The database's current time plus ``offset`` seconds (a bound parameter)."""

    type = UTCDateTime()
    inherit_cache = True

    def __init__(self, offset: float | BindParameter[Any] = 0.0) -> None:
        """``offset``: seconds, or a named bound parameter (a statement built once)."""
        if not isinstance(offset, BindParameter):
            offset = bindparam(None, float(offset), type_=Float())
        super().__init__(offset)

    @property
    def offset(self) -> ColumnElement[Any]:
        offset: ColumnElement[Any] = next(iter(self.clauses))
        return offset


@compiles(db_now, "postgresql")
def _postgresql(element: db_now, compiler: Any, **kw: Any) -> str:
    offset = compiler.process(element.offset, **kw)
    return f"(clock_timestamp() + make_interval(secs => {offset}))"


@compiles(db_now, "sqlite")
def _sqlite(element: db_now, compiler: Any, **kw: Any) -> str:
    offset = compiler.process(element.offset, **kw)
    # The same text format SQLAlchemy stores (6 fractional digits), so that comparisons
    # with stored values, which are string comparisons in SQLite, order instants.
    sql = "strftime('%Y-%m-%d %H:%M:%f000', 'now', printf('%+.3f seconds', OFFSET))"
    if compiler.dialect.paramstyle in ("format", "pyformat"):
        # Compiled for a driver that reads % as a placeholder (Django's cursors, through
        # self.atomic()): a literal % is written %%.
        sql = sql.replace("%", "%%")
    return sql.replace("OFFSET", offset)
