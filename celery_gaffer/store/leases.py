"""The lease table's statements: acquire, renew, check and release, by the database's clock.

A lease row is ``(name, owner, fence, lease_until)``. Every acquisition increments
``fence``, so a holder whose lease was taken over carries a stale fence, and every write
it tries is rejected by :func:`check_fence` in the write's own transaction (Kleppmann's
fencing token, checked by the storage itself). Every check also matches ``owner``
(unique to one acquisition): see :mod:`celery_gaffer.fencing.leases` for why.

These functions run inside a transaction the caller owns.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from sqlalchemy import Connection, Float, bindparam, literal, select, update
from sqlalchemy.dialects import postgresql, sqlite

from ..exceptions import FenceLost
from .dbclock import db_now
from .models import Models, table_of
from .prebuilt import prebuilt

RELEASED = datetime(1970, 1, 1, tzinfo=timezone.utc)  # lease_until of a freed lease
# The TTL parameter of the prebuilt statements, in seconds.
_TTL = bindparam("ttl", type_=Float())


def acquire(
    conn: Connection, models: Models, name: str, owner: str, ttl: float, *, steal: bool = False
) -> int | None:
    """Take ``name`` if it is free (or expired), or always when ``steal``; return the fence.

    One statement: insert on first use, otherwise increment the fence where
    ``lease_until < now`` by the database's clock. Returns None when a live holder has it.
    """
    upsert = acquire_statement(models, conn.dialect.name, steal=steal)
    fence = conn.execute(upsert, {"name": name, "owner": owner, "ttl": float(ttl)}).scalar()
    return None if fence is None else int(fence)


def acquire_statement(models: Models, dialect_name: str, *, steal: bool, unless: Any = None) -> Any:
    """The acquiring upsert (parameters ``name``, ``owner``, ``ttl``), returning the fence.

    ``unless``: a SQL condition under which nothing is acquired (no row is returned).
    """

    def build() -> Any:
        table = table_of(models.Lease)
        dialect = postgresql if dialect_name == "postgresql" else sqlite
        values = {
            "name": bindparam("name", type_=table.c.name.type),
            "owner": bindparam("owner", type_=table.c.owner.type),
            "fence": literal(1, table.c.fence.type),
            "lease_until": db_now(_TTL),
            "acquired_at": db_now(),
        }
        if unless is None:
            statement = dialect.insert(table).values(**values)
        else:
            source = select(*(value.label(name) for name, value in values.items()))
            statement = dialect.insert(table).from_select(list(values), source.where(~unless))
        return statement.on_conflict_do_update(
            index_elements=[table.c.name],
            set_={
                "owner": statement.excluded.owner,
                "fence": table.c.fence + 1,
                "lease_until": statement.excluded.lease_until,
                "acquired_at": statement.excluded.acquired_at,
            },
            where=None if steal else table.c.lease_until < db_now(),
        ).returning(table.c.fence)

    if unless is not None:
        return build()  # the caller builds it once
    return prebuilt((models.prefix, "lease_acquire", dialect_name, steal), build)


def held_by(table: Any, prefix: str = "b_") -> list[Any]:
    """The lease row ``:b_name`` while ``:b_fence`` and ``:b_owner`` hold it (``prefix``
    names the parameters)."""
    return [
        table.c.name == bindparam(prefix + "name"),
        table.c.fence == bindparam(prefix + "fence"),
        table.c.owner == bindparam(prefix + "owner"),
    ]


def renew(conn: Connection, models: Models, name: str, fence: int, owner: str, ttl: float) -> bool:
    """Extend the lease if ``fence`` (and ``owner``) still hold it; False: it was taken over."""

    def build() -> Any:
        table = table_of(models.Lease)
        return update(table).where(*held_by(table)).values(lease_until=db_now(_TTL))

    statement = prebuilt((models.prefix, "lease_renew"), build)
    params = {"b_name": name, "b_fence": fence, "b_owner": owner, "ttl": float(ttl)}
    return conn.execute(statement, params).rowcount == 1


def release(
    conn: Connection,
    models: Models,
    name: str,
    fence: int,
    owner: str,
    *,
    skip_locked: bool = False,
) -> bool:
    """Free the lease at once, if ``fence`` and ``owner`` still hold it (the fence is kept).

    ``skip_locked`` (PostgreSQL): do nothing rather than wait when another transaction
    has the row locked right now. Returns whether a row was released.
    """

    def build() -> Any:
        table = table_of(models.Lease)
        where = held_by(table)
        if skip_locked:
            free = select(table.c.name).where(*where).with_for_update(skip_locked=True)
            where.append(table.c.name.in_(free.scalar_subquery()))
        return update(table).where(*where).values(owner=None, lease_until=RELEASED)

    statement = prebuilt((models.prefix, "lease_release", skip_locked), build)
    params = {"b_name": name, "b_fence": fence, "b_owner": owner}
    return conn.execute(statement, params).rowcount == 1


def check_fence(conn: Connection, models: Models, name: str, fence: int, owner: str) -> None:
    """Lock the lease row if ``fence`` (and ``owner``) hold it, or raise :class:`FenceLost`.

    Run it in the transaction of the writes it protects: on PostgreSQL ``FOR UPDATE``
    holds the row until commit, so no contender can take the lease between this check
    and the commit; on SQLite the transaction's ``BEGIN IMMEDIATE`` write lock does.
    """
    if (
        conn.execute(fence_check_statement(models), fence_check_params(name, fence, owner)).first()
        is None
    ):
        raise fence_lost(name, fence)


def fence_check_statement(models: Models) -> Any:
    """The fence check of :func:`check_fence` (a row when the fence holds), built once."""

    def build() -> Any:
        table = table_of(models.Lease)
        return select(table.c.fence).where(*held_by(table)).with_for_update()

    return prebuilt((models.prefix, "lease_check"), build)


def fence_check_params(name: str, fence: int, owner: str) -> dict[str, Any]:
    return {"b_name": name, "b_fence": fence, "b_owner": owner}


def fence_lost(name: str, fence: int) -> FenceLost:
    return FenceLost(f"lease {name!r}: fence {fence} is no longer current; write rejected")


def holder(conn: Connection, models: Models, name: str) -> tuple[str | None, int] | None:
    """``(owner, fence)`` of the lease row ``name`` (None: no row). A plain read."""
    table = table_of(models.Lease)
    row = conn.execute(select(table.c.owner, table.c.fence).where(table.c.name == name)).first()
    return None if row is None else (row.owner, int(row.fence))
