"""Run records get ``created_at``; on PostgreSQL the ledger and the run records are
partitioned by time (``nominal_at``, ``created_at``), so that retention drops old periods.

The existing rows stay where they are: the old table becomes the partition
``{table}_history`` (a table with no rows is dropped instead), up to the week after its
newest row, below the periods made from then on; ids go on from the same sequence.
Existing run records get the migration's time as ``created_at``. See
:mod:`celery_gaffer.store.partitions`.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-02
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import sqlalchemy as sa
from alembic import context, op

from celery_gaffer.store import partitions
from celery_gaffer.store.models import models_for
from celery_gaffer.store.types import UTCDateTime

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

#: Per table: the partition key, its unique constraints and its indexes (name suffix,
#: columns), as 0001 made them.
_Columns = dict[str, tuple[str, ...]]
_TABLES: dict[str, tuple[str, _Columns, _Columns]] = {
    "fires": (
        "nominal_at",
        {"schedule_nominal_at": ("schedule", "nominal_at")},
        {"state_publish_after": ("state", "publish_after"), "created_at": ("created_at",)},
    ),
    "job_runs": (
        "created_at",
        {},
        {
            "task_id": ("task_id",),
            "schedule_nominal_at": ("schedule", "nominal_at"),
            "state_updated_at": ("state", "updated_at"),
        },
    ),
}


def _prefix() -> str:
    """The table prefix, passed by celery_gaffer.store.migrate at run time."""
    return str(context.config.attributes.get("table_prefix", "gaffer_"))


def upgrade() -> None:
    P = _prefix()
    bind = op.get_bind()
    if bind.dialect.name != "postgresql":
        with op.batch_alter_table(f"{P}job_runs") as batch:
            batch.add_column(
                sa.Column("created_at", UTCDateTime(), nullable=False, server_default=sa.func.now())
            )
        return
    op.add_column(
        f"{P}job_runs",
        sa.Column("created_at", UTCDateTime(), nullable=False, server_default=sa.func.now()),
    )
    for name, (key, uniques, indexes) in _TABLES.items():
        _partition(bind, f"{P}{name}", key, uniques, indexes)
    interval = context.config.attributes.get("partition_interval")
    partitions.ensure(
        bind,
        models_for(P),
        datetime.now(timezone.utc),
        partitions.DEFAULT_INTERVAL if interval is None else timedelta(seconds=interval),
    )


def _partition(
    bind: sa.Connection,
    table: str,
    key: str,
    uniques: dict[str, tuple[str, ...]],
    indexes: dict[str, tuple[str, ...]],
) -> None:
    q = bind.dialect.identifier_preparer.quote
    history = f"{table}_history"
    newest: datetime | None = bind.execute(
        sa.select(sa.func.max(sa.column(key))).select_from(sa.table(table))
    ).scalar()
    sequence = bind.execute(
        sa.text("SELECT pg_get_serial_sequence(:table, 'id')"), {"table": q(table)}
    ).scalar_one()
    # The old table and its indexes under other names, for the new table to take theirs.
    op.rename_table(table, history)
    for (index,) in bind.execute(
        sa.text("SELECT indexname FROM pg_indexes WHERE tablename = :table"), {"table": history}
    ):
        bind.execute(sa.text(f"ALTER INDEX {q(index)} RENAME TO {q(index + '_h')}"))
    bind.execute(
        sa.text(
            f"CREATE TABLE {q(table)} (LIKE {q(history)} INCLUDING DEFAULTS) "
            f"PARTITION BY RANGE ({q(key)})"
        )
    )
    bind.execute(sa.text(f"ALTER SEQUENCE {sequence} OWNED BY {q(table)}.id"))
    _constrain(table, key, uniques, indexes)
    if newest is None:
        op.drop_table(history)
    else:
        op.drop_constraint(f"pk_{table}_h", history, type_="primary")
        # The history ends where the period after its newest row begins (a week).
        week = partitions.DEFAULT_INTERVAL
        upper = partitions.period_start(newest, week) + week
        bind.execute(
            sa.text(
                f"ALTER TABLE {q(table)} ATTACH PARTITION {q(history)} "
                f"FOR VALUES FROM (MINVALUE) TO ('{upper.isoformat()}')"
            )
        )
    bind.execute(sa.text(f"CREATE TABLE {q(table + '_default')} PARTITION OF {q(table)} DEFAULT"))


def _constrain(
    table: str,
    key: str | None,
    uniques: dict[str, tuple[str, ...]],
    indexes: dict[str, tuple[str, ...]],
) -> None:
    """The primary key (``id``, with the partition key when partitioned), unique
    constraints and indexes of ``table``, named as 0001 named them."""
    op.create_primary_key(f"pk_{table}", table, ["id", key] if key else ["id"])
    for suffix, columns in uniques.items():
        op.create_unique_constraint(f"uq_{table}_{suffix}", table, list(columns))
    for suffix, columns in indexes.items():
        op.create_index(f"ix_{table}_{suffix}", table, list(columns))


def downgrade() -> None:
    P = _prefix()
    bind = op.get_bind()
    if bind.dialect.name == "postgresql":
        q = bind.dialect.identifier_preparer.quote
        for name, (_key, uniques, indexes) in _TABLES.items():
            table, plain = f"{P}{name}", f"{P}{name}_plain"
            sequence = bind.execute(
                sa.text("SELECT pg_get_serial_sequence(:table, 'id')"), {"table": q(table)}
            ).scalar_one()
            bind.execute(sa.text(f"CREATE TABLE {q(plain)} (LIKE {q(table)} INCLUDING DEFAULTS)"))
            names = [c["name"] for c in sa.inspect(bind).get_columns(table)]
            source = sa.table(table, *(sa.column(name) for name in names))
            bind.execute(
                sa.insert(sa.table(plain, *(sa.column(name) for name in names))).from_select(
                    names, sa.select(*(source.c[name] for name in names))
                )
            )
            bind.execute(sa.text(f"ALTER SEQUENCE {sequence} OWNED BY {q(plain)}.id"))
            op.drop_table(table)
            op.rename_table(plain, table)
            _constrain(table, None, uniques, indexes)
    with op.batch_alter_table(f"{P}job_runs") as batch:
        batch.drop_column("created_at")
