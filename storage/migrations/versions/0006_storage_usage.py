"""jobs.results_bytes and data_usage: what each user keeps, for the storage quota

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-25 20:00:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("results_bytes", sa.BigInteger(), nullable=False, server_default="0")
        )
    op.create_table(
        "data_usage",
        sa.Column("user_id", sa.Integer(), nullable=False),
        sa.Column("data_bytes", sa.BigInteger(), nullable=False),
        sa.ForeignKeyConstraint(["user_id"], ["users.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("user_id"),
    )


def downgrade() -> None:
    op.drop_table("data_usage")
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.drop_column("results_bytes")
