"""scheduler fence: the newest scheduler lease token whose pass wrote its decisions

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-02 17:00:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    fence = op.create_table(
        "scheduler_fence",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("token", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.bulk_insert(fence, [{"id": 1, "token": 0}])


def downgrade() -> None:
    op.drop_table("scheduler_fence")
