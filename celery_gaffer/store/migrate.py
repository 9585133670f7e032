"""Apply celery-gaffer's Alembic migrations, shipped inside the package."""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import Column, Connection, Engine, MetaData, String, Table, inspect, select

from .models import models_for

if TYPE_CHECKING:
    from alembic.config import Config

MIGRATIONS_DIR = Path(__file__).with_name("migrations")
# A migration's header, as Alembic's template writes it: ``revision = "0002"`` and
# ``down_revision = "0001"`` (or None) at the start of a line.
_HEADER = re.compile(
    r'^(?P<key>revision|down_revision)\s*(?::[^=\n]*)?=\s*(?:"(?P<value>[^"]*)"|None)\s*$',
    re.MULTILINE,
)


def alembic_config(
    connection: Connection, prefix: str, partition_interval: float | None = None
) -> Config:
    """An Alembic config bound to ``connection`` for the tables of ``prefix`` (and the
    period of the partitions a migration makes, in seconds; default a week)."""
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    config.attributes["connection"] = connection
    config.attributes["table_prefix"] = prefix
    if partition_interval is not None:
        config.attributes["partition_interval"] = partition_interval
    return config


def shipped_revisions() -> dict[str, str | None]:
    """Each revision shipped with this version -> the one it follows (None for the
    first), read from the migrations' headers: every command checks the database's
    revision, and importing Alembic for that would slow every one of them down."""
    shipped: dict[str, str | None] = {}
    for path in sorted((MIGRATIONS_DIR / "versions").glob("*.py")):
        header = {
            found["key"]: found["value"] for found in _HEADER.finditer(path.read_text("utf-8"))
        }
        if "revision" in header:
            shipped[header["revision"]] = header.get("down_revision")
    return shipped


def head_revision() -> str:
    """The newest revision shipped with this version of celery-gaffer."""
    shipped = shipped_revisions()
    heads = set(shipped) - set(shipped.values())
    if len(heads) != 1:
        raise RuntimeError(f"celery-gaffer ships {len(heads)} migration heads, not one")
    return heads.pop()


def current_revision(engine: Engine, prefix: str) -> str | None:
    """The revision the database is at, or None when it was never migrated."""
    version_table = models_for(prefix).version_table
    with engine.connect() as connection:
        if not inspect(connection).has_table(version_table):
            return None
        table = Table(version_table, MetaData(), Column("version_num", String(32)))
        return connection.execute(select(table.c.version_num)).scalar()


def known_revisions() -> set[str]:
    """Every revision this version of celery-gaffer ships."""
    return set(shipped_revisions())


def migrate(
    engine: Engine, prefix: str, to: str = "head", *, partition_interval: float | None = None
) -> tuple[str | None, str | None]:
    """Upgrade (or downgrade) to revision ``to`` (default: the newest; ``base``: no
    tables); a second call changes nothing. Returns the revision before and after.
    ``partition_interval``: ``gaffer_partition_interval``, for the partitions made.

    Raises ValueError for a revision this version does not know, on either side.
    """
    known = known_revisions()
    if to not in (*known, "head", "base"):
        raise ValueError(
            f"unknown revision {to!r} (this version knows: {', '.join(sorted(known))})"
        )
    before = current_revision(engine, prefix)
    if before is not None and before not in known:
        raise ValueError(
            f"the database is at revision {before!r}, which this version does not know"
        )
    from alembic import command

    target = head_revision() if to == "head" else to
    with engine.connect() as connection:
        config = alembic_config(connection, prefix, partition_interval)
        if target == "base" or (before is not None and _is_older(target, before)):
            command.downgrade(config, target)
        else:
            command.upgrade(config, target)
        connection.commit()
    return before, current_revision(engine, prefix)


def _is_older(target: str, than: str) -> bool:
    """Whether ``target`` comes before ``than`` in the shipped history."""
    shipped = shipped_revisions()
    below = shipped.get(than)
    while below is not None:
        if below == target:
            return True
        below = shipped.get(below)
    return False
