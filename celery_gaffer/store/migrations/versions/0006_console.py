"""The audit log, the Beats' registry, pause notes and times, and run details.

``{prefix}audit`` records every change to a schedule (who, through what, each field
before and after), written in the change's transaction. ``{prefix}beats`` holds one row
per running Beat, refreshed as it ticks. Schedules gain ``paused_note`` and
``paused_until`` (Beat resumes the schedule then); runs gain their ``args``, ``kwargs``
and ``traceback`` (bounded in size).

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-05
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import context, op

from celery_gaffer.store.types import BigId, UTCDateTime

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def _prefix() -> str:
    """The table prefix, passed by celery_gaffer.store.migrate at run time."""
    return str(context.config.attributes.get("table_prefix", "gaffer_"))


def upgrade() -> None:
    P = _prefix()
    op.create_table(
        f"{P}audit",
        sa.Column("id", BigId, autoincrement=True, nullable=False),
        sa.Column("at", UTCDateTime(), nullable=False),
        sa.Column("actor", sa.String(255), nullable=False),
        sa.Column("source", sa.String(8), nullable=False),
        sa.Column("action", sa.String(32), nullable=False),
        sa.Column("schedule", sa.String(200), nullable=True),
        sa.Column("note", sa.Text(), nullable=True),
        sa.Column("changes", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=f"pk_{P}audit"),
    )
    op.create_index(f"ix_{P}audit_schedule_id", f"{P}audit", ["schedule", "id"])
    op.create_index(f"ix_{P}audit_at", f"{P}audit", ["at"])
    op.create_table(
        f"{P}beats",
        sa.Column("name", sa.String(255), nullable=False),
        sa.Column("host", sa.String(255), nullable=False),
        sa.Column("pid", sa.Integer(), nullable=False),
        sa.Column("started_at", UTCDateTime(), nullable=False),
        sa.Column("last_tick_at", UTCDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("name", name=f"pk_{P}beats"),
    )
    with op.batch_alter_table(f"{P}schedules") as batch:
        batch.add_column(sa.Column("paused_note", sa.Text(), nullable=True))
        batch.add_column(sa.Column("paused_until", UTCDateTime(), nullable=True))
    op.create_index(f"ix_{P}schedules_paused_until", f"{P}schedules", ["paused_until"])
    with op.batch_alter_table(f"{P}job_runs") as batch:
        batch.add_column(sa.Column("args", sa.JSON(), nullable=True))
        batch.add_column(sa.Column("kwargs", sa.JSON(), nullable=True))
        batch.add_column(sa.Column("traceback", sa.Text(), nullable=True))


def downgrade() -> None:
    P = _prefix()
    with op.batch_alter_table(f"{P}job_runs") as batch:
        for column in ("traceback", "kwargs", "args"):
            batch.drop_column(column)
    op.drop_index(f"ix_{P}schedules_paused_until", f"{P}schedules")
    with op.batch_alter_table(f"{P}schedules") as batch:
        for column in ("paused_until", "paused_note"):
            batch.drop_column(column)
    op.drop_table(f"{P}beats")
    op.drop_table(f"{P}audit")
