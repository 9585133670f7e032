"""On PostgreSQL, the function ``{prefix}seal`` that seals a fenced commit.

It runs in the commit's transaction, after its writes: it locks each lease row the run
holds while its fence and owner still hold it (``FOR UPDATE``), then claims or completes
the run's key with the same upsert as before. A refusal raises an error with a Gaffer
SQLSTATE (``ZG001``: a fence is no longer current; ``ZG002``: the key was completed by
another run), so that a ``COMMIT`` sent right behind the call is never carried out. See
:mod:`celery_gaffer.store.seal`. SQLite runs the same two steps as statements.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-05
"""

from __future__ import annotations

from alembic import context, op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

_FUNCTION = """
CREATE OR REPLACE FUNCTION {P}seal(
    p_names varchar[], p_fences bigint[], p_owners varchar[],
    p_key varchar, p_task_id varchar, p_fence bigint, p_complete boolean
) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    FOR i IN 1 .. coalesce(array_length(p_names, 1), 0) LOOP
        PERFORM 1 FROM {P}leases
            WHERE name = p_names[i] AND fence = p_fences[i] AND owner = p_owners[i]
            FOR UPDATE;
        IF NOT FOUND THEN
            RAISE EXCEPTION USING ERRCODE = 'ZG001', MESSAGE = format(
                'lease %L: fence %s is no longer current; write rejected',
                p_names[i], p_fences[i]);
        END IF;
    END LOOP;
    IF p_key IS NOT NULL THEN
        INSERT INTO {P}keys AS k (key, state, task_id, fence, claimed_at, completed_at)
            VALUES (
                p_key, CASE WHEN p_complete THEN 'completed' ELSE 'claimed' END,
                p_task_id, p_fence, clock_timestamp(),
                CASE WHEN p_complete THEN clock_timestamp() END)
            ON CONFLICT (key) DO UPDATE SET
                state = excluded.state, task_id = excluded.task_id,
                fence = excluded.fence, completed_at = excluded.completed_at
            WHERE k.state = 'claimed';
        IF NOT FOUND THEN
            RAISE EXCEPTION USING ERRCODE = 'ZG002', MESSAGE = format(
                'key %L was already completed by another run', p_key);
        END IF;
    END IF;
END
$$
"""


def _prefix() -> str:
    """The table prefix, passed by celery_gaffer.store.migrate at run time."""
    return str(context.config.attributes.get("table_prefix", "gaffer_"))


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(_FUNCTION.replace("{P}", _prefix()))


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        P = _prefix()
        op.execute(
            f"DROP FUNCTION IF EXISTS {P}seal("
            "varchar[], bigint[], varchar[], varchar, varchar, bigint, boolean)"
        )
