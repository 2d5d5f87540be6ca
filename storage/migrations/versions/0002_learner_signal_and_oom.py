"""learners keep the signal and the cluster's out-of-memory word of their exit

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-23 16:10:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("learners", schema=None) as batch_op:
        batch_op.add_column(sa.Column("signal", sa.String(length=16), nullable=True))
        batch_op.add_column(sa.Column("oom_killed", sa.Boolean(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("learners", schema=None) as batch_op:
        batch_op.drop_column("oom_killed")
        batch_op.drop_column("signal")
