"""Business calendars: stored calendars' dates, a schedule's ``skip_on`` / ``on_skip``,
and the ledger's ``reason`` (why a calendar skipped or moved a fire).

``{prefix}calendar_days`` holds one row per date of a calendar stored in the database.
Schedules gain ``skip_on`` (a JSON list of calendar names) and ``on_skip``; fires gain
``reason`` (added to the partitioned ledger's parent on PostgreSQL, which adds it to
every partition).

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-12
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import context, op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def _prefix() -> str:
    """The table prefix, passed by celery_gaffer.store.migrate at run time."""
    return str(context.config.attributes.get("table_prefix", "gaffer_"))


def upgrade() -> None:
    P = _prefix()
    op.create_table(
        f"{P}calendar_days",
        sa.Column("calendar", sa.String(64), nullable=False),
        sa.Column("day", sa.Date(), nullable=False),
        sa.PrimaryKeyConstraint("calendar", "day", name=f"pk_{P}calendar_days"),
    )
    with op.batch_alter_table(f"{P}schedules") as batch:
        batch.add_column(sa.Column("skip_on", sa.JSON(), nullable=True))
        batch.add_column(sa.Column("on_skip", sa.String(12), nullable=True))
    # Not batch_alter_table: on SQLite a plain ADD COLUMN keeps the table, and on
    # PostgreSQL the ledger is partitioned (a batch copy would not be).
    op.add_column(f"{P}fires", sa.Column("reason", sa.Text(), nullable=True))


def downgrade() -> None:
    P = _prefix()
    # The fires a calendar skipped: 0006 knows no "skipped" state, and would count them
    # as fires that happened (a schedule then alerts late).
    fires = sa.table(f"{P}fires", sa.column("state", sa.String))
    op.execute(fires.delete().where(fires.c.state == "skipped"))
    op.drop_column(f"{P}fires", "reason")
    with op.batch_alter_table(f"{P}schedules") as batch:
        for column in ("on_skip", "skip_on"):
            batch.drop_column(column)
    op.drop_table(f"{P}calendar_days")
