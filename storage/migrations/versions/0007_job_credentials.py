"""job_credentials: the tokens minted for jobs' learners, kept as hashes

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-26 05:40:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "job_credentials",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("job_id", sa.String(length=40), nullable=False),
        sa.Column("token_hash", sa.String(length=64), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(["job_id"], ["jobs.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("token_hash"),
    )
    op.create_index("ix_job_credentials_job_id", "job_credentials", ["job_id"], unique=False)


def downgrade() -> None:
    op.drop_index("ix_job_credentials_job_id", table_name="job_credentials")
    op.drop_table("job_credentials")
