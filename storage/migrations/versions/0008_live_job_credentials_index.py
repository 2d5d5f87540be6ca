"""job_credentials: a partial index on the tokens not revoked (read every second)

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-26 08:40:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

LIVE = sa.text("revoked_at IS NULL")


def upgrade() -> None:
    op.create_index(
        "ix_job_credentials_live",
        "job_credentials",
        ["job_id"],
        unique=False,
        postgresql_where=LIVE,
        sqlite_where=LIVE,
    )


def downgrade() -> None:
    op.drop_index("ix_job_credentials_live", table_name="job_credentials")
