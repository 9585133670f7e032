"""Initial schema: schedules, fire ledger, leases, idempotency keys, cursors, job runs.

Revision ID: 0001
Revises:
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import context, op

from celery_gaffer.store.types import BigId, UTCDateTime

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def _prefix() -> str:
    """The table prefix, passed by celery_gaffer.store.migrate at run time."""
    return str(context.config.attributes.get("table_prefix", "gaffer_"))


def upgrade() -> None:
    P = _prefix()
    op.create_table(
        f"{P}schedules",
        sa.Column("id", BigId, autoincrement=True, nullable=False),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("task", sa.String(255), nullable=False),
        sa.Column("schedule", sa.JSON(), nullable=False),
        sa.Column("args", sa.JSON(), nullable=False),
        sa.Column("kwargs", sa.JSON(), nullable=False),
        sa.Column("options", sa.JSON(), nullable=False),
        sa.Column("catchup", sa.String(8), nullable=False),
        sa.Column("starting_deadline", sa.Float(), nullable=True),
        sa.Column("overlap", sa.String(8), nullable=False),
        sa.Column("grace", sa.Float(), nullable=True),
        sa.Column("enabled", sa.Boolean(), nullable=False),
        sa.Column("source", sa.String(8), nullable=False),
        sa.Column("watermark_at", UTCDateTime(), nullable=False),
        sa.Column("next_fire_at", UTCDateTime(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("health", sa.String(8), nullable=False),
        sa.Column("check_at", UTCDateTime(), nullable=True),
        sa.Column("consecutive_failures", sa.Integer(), nullable=False),
        sa.Column("last_success_at", UTCDateTime(), nullable=True),
        sa.Column("last_success_nominal_at", UTCDateTime(), nullable=True),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("updated_at", UTCDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=f"pk_{P}schedules"),
        sa.UniqueConstraint("name", name=f"uq_{P}schedules_name"),
    )
    op.create_index(f"ix_{P}schedules_next_fire_at", f"{P}schedules", ["next_fire_at"])
    op.create_index(f"ix_{P}schedules_check_at", f"{P}schedules", ["check_at"])
    # Beat's start-up sync reads the (few) config schedules among (many) db ones.
    op.create_index(f"ix_{P}schedules_source", f"{P}schedules", ["source"])

    op.create_table(
        f"{P}fires",
        sa.Column("id", BigId, autoincrement=True, nullable=False),
        sa.Column("schedule", sa.String(200), nullable=False),
        sa.Column("nominal_at", UTCDateTime(), nullable=False),
        sa.Column("key", sa.String(512), nullable=False),
        sa.Column("task_id", sa.String(64), nullable=False),
        sa.Column("kind", sa.String(10), nullable=False),
        sa.Column("state", sa.String(12), nullable=False),
        sa.Column("publish_after", UTCDateTime(), nullable=False),
        sa.Column("publish_count", sa.Integer(), nullable=False),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("sent_at", UTCDateTime(), nullable=True),
        sa.PrimaryKeyConstraint("id", name=f"pk_{P}fires"),
        sa.UniqueConstraint("schedule", "nominal_at", name=f"uq_{P}fires_schedule_nominal_at"),
    )
    op.create_index(f"ix_{P}fires_state_publish_after", f"{P}fires", ["state", "publish_after"])
    op.create_index(f"ix_{P}fires_created_at", f"{P}fires", ["created_at"])

    op.create_table(
        f"{P}leases",
        sa.Column("name", sa.String(255), nullable=False),
        sa.Column("owner", sa.String(255), nullable=True),
        sa.Column("fence", sa.BigInteger(), nullable=False),
        sa.Column("lease_until", UTCDateTime(), nullable=False),
        sa.Column("acquired_at", UTCDateTime(), nullable=True),
        sa.PrimaryKeyConstraint("name", name=f"pk_{P}leases"),
    )

    op.create_table(
        f"{P}keys",
        sa.Column("key", sa.String(512), nullable=False),
        sa.Column("state", sa.String(10), nullable=False),
        sa.Column("task_id", sa.String(255), nullable=False),
        sa.Column("fence", sa.BigInteger(), nullable=True),
        sa.Column("claimed_at", UTCDateTime(), nullable=False),
        sa.Column("completed_at", UTCDateTime(), nullable=True),
        sa.PrimaryKeyConstraint("key", name=f"pk_{P}keys"),
    )
    op.create_index(f"ix_{P}keys_completed_at", f"{P}keys", ["completed_at"])

    op.create_table(
        f"{P}cursors",
        sa.Column("name", sa.String(512), nullable=False),
        sa.Column("value", sa.JSON(), nullable=True),
        sa.Column("processed", sa.BigInteger(), nullable=False),
        sa.Column("fence", sa.BigInteger(), nullable=True),
        sa.Column("updated_at", UTCDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("name", name=f"pk_{P}cursors"),
    )

    op.create_table(
        f"{P}job_runs",
        sa.Column("id", BigId, autoincrement=True, nullable=False),
        sa.Column("task_id", sa.String(255), nullable=False),
        sa.Column("task_name", sa.String(255), nullable=False),
        sa.Column("schedule", sa.String(200), nullable=True),
        sa.Column("nominal_at", UTCDateTime(), nullable=True),
        sa.Column("key", sa.String(512), nullable=True),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("state", sa.String(12), nullable=False),
        sa.Column("started_at", UTCDateTime(), nullable=True),
        sa.Column("finished_at", UTCDateTime(), nullable=True),
        sa.Column("duration", sa.Float(), nullable=True),
        sa.Column("items", sa.BigInteger(), nullable=True),
        sa.Column("cursor", sa.Text(), nullable=True),
        sa.Column("fence", sa.BigInteger(), nullable=True),
        sa.Column("lease", sa.String(255), nullable=True),
        sa.Column("worker", sa.String(255), nullable=True),
        sa.Column("error_type", sa.String(255), nullable=True),
        sa.Column("error_message", sa.Text(), nullable=True),
        sa.Column("next_run_at", UTCDateTime(), nullable=True),
        sa.Column("updated_at", UTCDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=f"pk_{P}job_runs"),
    )
    op.create_index(f"ix_{P}job_runs_task_id", f"{P}job_runs", ["task_id"])
    op.create_index(
        f"ix_{P}job_runs_schedule_nominal_at", f"{P}job_runs", ["schedule", "nominal_at"]
    )
    op.create_index(f"ix_{P}job_runs_state_updated_at", f"{P}job_runs", ["state", "updated_at"])


def downgrade() -> None:
    P = _prefix()
    for table in ("job_runs", "cursors", "keys", "leases", "fires", "schedules"):
        op.drop_table(f"{P}{table}")
