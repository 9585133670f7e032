"""The seal of a fenced commit, in the commit's own transaction: one form per database.

Sealing checks the fence of every lease a run holds (a row lock while the fence and the
owner still hold the row) and claims or completes the run's key. On PostgreSQL it is
one call of the function ``{prefix}seal`` (made by migration 0005), which raises a Gaffer
SQLSTATE on a refusal; raised, the transaction is failed, so a ``COMMIT`` sent behind it
in the same round trip (:func:`~.pipelined.commit_with`) is not carried out. On SQLite
it is :func:`~.leases.check_fence` per lease, then :func:`~.keys.claim_key`, each a
conditional statement whose returned row is checked.

The statements are looked up on their modules at call time, so that the chaos suite's
self-test can break them in one place.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import Connection, bindparam, text
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.exc import DBAPIError
from sqlalchemy.types import BigInteger, Boolean, String

from ..exceptions import AlreadyProcessed, FenceLost, GafferError
from . import keys as key_rows
from . import leases as lease_rows
from .models import Models
from .pipelined import commit_with, pipelines
from .prebuilt import prebuilt

#: The SQLSTATEs ``{prefix}seal`` raises, and the errors they become.
REFUSALS: dict[str, type[GafferError]] = {"ZG001": FenceLost, "ZG002": AlreadyProcessed}

#: One held lease: (name, fence, owner).
Held = tuple[str, int, str]


def seal(
    conn: Connection,
    models: Models,
    held: Sequence[Held],
    key: str | None,
    task_id: str,
    fence: int | None,
    *,
    complete: bool,
    commit: bool = False,
) -> None:
    """Check ``held`` and claim ``key`` in ``conn``'s transaction; raise FenceLost or
    AlreadyProcessed (the transaction is then to be rolled back).

    ``commit``: also COMMIT the transaction, in the same round trip where psycopg's
    pipeline allows it (SQLAlchemy's own commit afterwards finds it over); elsewhere the
    COMMIT is left to the caller.
    """
    if conn.dialect.name != "postgresql":
        for name, lease_fence, owner in held:
            lease_rows.check_fence(conn, models, name, lease_fence, owner)
        if key is not None:
            key_rows.claim_key(conn, models, key, task_id, fence, complete=complete)
        return
    statement = seal_call(models)
    params = seal_params(held, key, task_id, fence, complete=complete)
    try:
        if commit and pipelines(conn):
            commit_with(conn, [(statement, params)])
        else:
            conn.execute(statement, params)
    except DBAPIError as exc:
        refused = refusal(exc)
        if refused is None:
            raise
        raise refused from None


def seal_params(
    held: Sequence[Held], key: str | None, task_id: str, fence: int | None, *, complete: bool
) -> dict[str, Any]:
    """The parameters of :func:`seal_call`'s statement."""
    return {
        "names": [name for name, _, _ in held],
        "fences": [lease_fence for _, lease_fence, _ in held],
        "owners": [owner for _, _, owner in held],
        "key": key,
        "task_id": task_id,
        "fence": fence,
        "complete": complete,
    }


def seal_call(models: Models) -> Any:
    """``SELECT {prefix}seal(...)`` with its parameters typed, built once per prefix."""

    def build() -> Any:
        return text(
            f"SELECT {models.prefix}seal(CAST(:names AS varchar[]), "
            "CAST(:fences AS bigint[]), CAST(:owners AS varchar[]), "
            "CAST(:key AS varchar), CAST(:task_id AS varchar), CAST(:fence AS bigint), "
            "CAST(:complete AS boolean))"
        ).bindparams(
            bindparam("names", type_=ARRAY(String())),
            bindparam("fences", type_=ARRAY(BigInteger())),
            bindparam("owners", type_=ARRAY(String())),
            bindparam("key", type_=String()),
            bindparam("task_id", type_=String()),
            bindparam("fence", type_=BigInteger()),
            bindparam("complete", type_=Boolean()),
        )

    return prebuilt((models.prefix, "seal"), build)


def refusal(exc: DBAPIError) -> GafferError | None:
    """The Gaffer error a refusal of ``{prefix}seal`` stands for (None: not a refusal),
    with the server's message."""
    orig: Any = exc.orig
    error = REFUSALS.get(getattr(orig, "sqlstate", None) or "")
    if error is None:
        return None
    return error(orig.diag.message_primary or str(orig))
