"""learners keep how they failed (cause, last line); deleted jobs are in state DELETED

A failure decided later from the stored rows (by whichever process acts next) must be
classed as it was reported, so the row keeps the cause and the program's last line.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-24 12:00:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("learners", schema=None) as batch_op:
        batch_op.add_column(sa.Column("cause", sa.String(length=16), nullable=True))
        batch_op.add_column(sa.Column("last_line", sa.Text(), nullable=False, server_default=""))
    op.execute("UPDATE jobs SET state = 'DELETED' WHERE deleted_at IS NOT NULL")


def downgrade() -> None:
    # A deleted job's state before it was deleted is in its events, not worth restoring.
    op.execute("UPDATE jobs SET state = 'FAILED' WHERE state = 'DELETED'")
    with op.batch_alter_table("learners", schema=None) as batch_op:
        batch_op.drop_column("last_line")
        batch_op.drop_column("cause")
