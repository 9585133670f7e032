"""Runs keep their OpenTelemetry trace id.

``{prefix}job_runs`` gains ``trace_id`` (32 hex digits, NULL when the run was not traced),
written with the run's start record.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-05
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import context, op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def _prefix() -> str:
    """The table prefix, passed by celery_gaffer.store.migrate at run time."""
    return str(context.config.attributes.get("table_prefix", "gaffer_"))


def upgrade() -> None:
    P = _prefix()
    with op.batch_alter_table(f"{P}job_runs") as batch:
        batch.add_column(sa.Column("trace_id", sa.String(32), nullable=True))


def downgrade() -> None:
    P = _prefix()
    with op.batch_alter_table(f"{P}job_runs") as batch:
        batch.drop_column("trace_id")
