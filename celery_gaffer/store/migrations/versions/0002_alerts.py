"""The alert outbox: webhook alerts of health changes, retried until sent.

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import context, op

from celery_gaffer.store.types import BigId, UTCDateTime

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def _prefix() -> str:
    """The table prefix, passed by celery_gaffer.store.migrate at run time."""
    return str(context.config.attributes.get("table_prefix", "gaffer_"))


def upgrade() -> None:
    P = _prefix()
    op.create_table(
        f"{P}alerts",
        sa.Column("id", BigId, autoincrement=True, nullable=False),
        sa.Column("schedule", sa.String(200), nullable=False),
        sa.Column("body", sa.JSON(), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("next_attempt_at", UTCDateTime(), nullable=True),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("sent_at", UTCDateTime(), nullable=True),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("id", name=f"pk_{P}alerts"),
    )
    op.create_index(f"ix_{P}alerts_next_attempt_at", f"{P}alerts", ["next_attempt_at"])
    op.create_index(f"ix_{P}alerts_created_at", f"{P}alerts", ["created_at"])


def downgrade() -> None:
    op.drop_table(f"{_prefix()}alerts")
