"""Apply celery-gaffer's Alembic migrations, shipped inside the package."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.script import ScriptDirectory
from sqlalchemy import Column, Connection, Engine, MetaData, String, Table, inspect, select

from .models import models_for

MIGRATIONS_DIR = Path(__file__).with_name("migrations")


def alembic_config(connection: Connection, prefix: str) -> Config:
    """An Alembic config bound to ``connection`` for the tables of ``prefix``."""
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    config.attributes["connection"] = connection
    config.attributes["table_prefix"] = prefix
    return config


def head_revision() -> str:
    """The newest revision shipped with this version of celery-gaffer."""
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    head = ScriptDirectory.from_config(config).get_current_head()
    if head is None:
        raise RuntimeError("celery-gaffer ships no migrations")
    return head


def current_revision(engine: Engine, prefix: str) -> str | None:
    """The revision the database is at, or None when it was never migrated."""
    version_table = models_for(prefix).version_table
    with engine.connect() as connection:
        if not inspect(connection).has_table(version_table):
            return None
        table = Table(version_table, MetaData(), Column("version_num", String(32)))
        return connection.execute(select(table.c.version_num)).scalar()


def migrate(engine: Engine, prefix: str) -> tuple[str | None, str]:
    """Upgrade to the newest revision; a second call changes nothing.

    Returns the revision before and after.
    """
    before = current_revision(engine, prefix)
    with engine.connect() as connection:
        command.upgrade(alembic_config(connection, prefix), "head")
        connection.commit()
    return before, head_revision()
