"""What the importer tests share: a Gaffer database that refuses one schedule's insert."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import create_engine, text
from sqlalchemy.pool import NullPool

TRIGGER = "gaffer_test_refuse_import"


@contextmanager
def insert_refused(database_url: str, name: str) -> Iterator[None]:
    """While open, the Gaffer database (SQLite or PostgreSQL) raises on an insert of the
    schedule ``name`` (a trigger), so that a write fails after the ones before it."""
    assert name.isidentifier(), name  # spliced into the DDL below
    engine = create_engine(database_url, poolclass=NullPool)
    sqlite = engine.dialect.name == "sqlite"
    if sqlite:
        create = [
            f"CREATE TRIGGER {TRIGGER} BEFORE INSERT ON gaffer_schedules "
            f"WHEN NEW.name = '{name}' BEGIN SELECT RAISE(ABORT, 'refused by the test'); END"
        ]
        drop = [f"DROP TRIGGER IF EXISTS {TRIGGER}"]
    else:
        create = [
            f"CREATE FUNCTION {TRIGGER}() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
            f"IF NEW.name = '{name}' THEN RAISE EXCEPTION 'refused by the test'; END IF; "
            "RETURN NEW; END $$",
            f"CREATE TRIGGER {TRIGGER} BEFORE INSERT ON gaffer_schedules "
            f"FOR EACH ROW EXECUTE FUNCTION {TRIGGER}()",
        ]
        drop = [
            f"DROP TRIGGER IF EXISTS {TRIGGER} ON gaffer_schedules",
            f"DROP FUNCTION IF EXISTS {TRIGGER}()",
        ]
    try:
        with engine.begin() as conn:
            for statement in create:
                conn.execute(text(statement))
        yield
    finally:
        with engine.begin() as conn:
            for statement in drop:
                conn.execute(text(statement))
        engine.dispose()
