"""Alembic environment for celery-gaffer's own tables.

Run through :func:`celery_gaffer.store.migrate.migrate`, which passes the connection and
the table prefix in ``config.attributes``. The version table is ``{prefix}alembic_version``
and only tables with the prefix are compared, so the user's own Alembic is never touched.
"""

from __future__ import annotations

from alembic import context
from sqlalchemy import text

from celery_gaffer.store.models import models_for

# An arbitrary constant: the advisory lock that serialises concurrent `gaffer migrate` runs.
_MIGRATE_LOCK_ID = 0x6761_6666

config = context.config
connection = config.attributes["connection"]
prefix: str = config.attributes.get("table_prefix", "gaffer_")
models = models_for(prefix)


def _include_name(name: str | None, type_: str, _parents: object) -> bool:
    if type_ == "table":
        return bool(name) and str(name).startswith(prefix) and name != models.version_table
    return True


context.configure(
    connection=connection,
    target_metadata=models.metadata,
    version_table=models.version_table,
    include_name=_include_name,
    compare_type=True,
    render_as_batch=connection.dialect.name == "sqlite",
)

with context.begin_transaction():
    if connection.dialect.name == "postgresql":
        connection.execute(text("SELECT pg_advisory_xact_lock(:lock)"), {"lock": _MIGRATE_LOCK_ID})
    context.run_migrations()
