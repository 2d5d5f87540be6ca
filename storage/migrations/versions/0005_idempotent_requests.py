"""idempotent_requests: the answers that retries sent with an Idempotency-Key get back

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-25 19:00:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "idempotent_requests",
        sa.Column("scope", sa.String(length=64), nullable=False),
        sa.Column("key", sa.String(length=255), nullable=False),
        sa.Column("method", sa.String(length=8), nullable=False),
        sa.Column("path", sa.Text(), nullable=False),
        sa.Column("state", sa.String(length=8), nullable=False),
        sa.Column("fingerprint", sa.String(length=64), nullable=True),
        sa.Column("status", sa.Integer(), nullable=True),
        sa.Column("headers", sa.JSON(), nullable=False),
        sa.Column("body", sa.LargeBinary(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("scope", "key"),
    )
    op.create_index(
        "ix_idempotent_requests_created_at", "idempotent_requests", ["created_at"], unique=False
    )


def downgrade() -> None:
    op.drop_index("ix_idempotent_requests_created_at", table_name="idempotent_requests")
    op.drop_table("idempotent_requests")
