"""teams' quotas for the scheduler: nominal amounts, borrowing limits, weight, max priority

Every amount is NULL, not limited, until a platform admin sets it; GPUs are a JSON mapping
of product to count. A team's weight in fair sharing is 1 and the highest priority its jobs
may take is 0 until set.

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-26 15:00:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

AMOUNTS = (
    ("quota_gpus", sa.JSON()),
    ("quota_millicpus", sa.BigInteger()),
    ("quota_memory", sa.BigInteger()),
    ("quota_jobs", sa.Integer()),
    ("borrow_gpus", sa.JSON()),
    ("borrow_millicpus", sa.BigInteger()),
    ("borrow_memory", sa.BigInteger()),
    ("borrow_jobs", sa.Integer()),
)


def upgrade() -> None:
    with op.batch_alter_table("teams", schema=None) as batch_op:
        for name, kind in AMOUNTS:
            batch_op.add_column(sa.Column(name, kind, nullable=True))
        batch_op.add_column(
            sa.Column("weight", sa.Float(), nullable=False, server_default=sa.text("1"))
        )
        batch_op.add_column(
            sa.Column("max_priority", sa.Integer(), nullable=False, server_default=sa.text("0"))
        )


def downgrade() -> None:
    with op.batch_alter_table("teams", schema=None) as batch_op:
        batch_op.drop_column("max_priority")
        batch_op.drop_column("weight")
        for name, _kind in reversed(AMOUNTS):
            batch_op.drop_column(name)
