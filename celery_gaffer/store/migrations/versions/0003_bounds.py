"""Schedule bounds (start_at, end_at, max_runs and the count of fires sent) and ping URLs.

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import context, op

from celery_gaffer.store.types import UTCDateTime

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def _prefix() -> str:
    """The table prefix, passed by celery_gaffer.store.migrate at run time."""
    return str(context.config.attributes.get("table_prefix", "gaffer_"))


def upgrade() -> None:
    with op.batch_alter_table(f"{_prefix()}schedules") as batch:
        batch.add_column(sa.Column("start_at", UTCDateTime(), nullable=True))
        batch.add_column(sa.Column("end_at", UTCDateTime(), nullable=True))
        batch.add_column(sa.Column("max_runs", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("fired_count", sa.Integer(), nullable=False, server_default="0"))
        batch.add_column(sa.Column("ping_url", sa.String(2048), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table(f"{_prefix()}schedules") as batch:
        for column in ("ping_url", "fired_count", "max_runs", "end_at", "start_at"):
            batch.drop_column(column)
