"""teams, memberships and named API tokens; every job belongs to a team

Every existing user gets a team of their own, named after them, of which they are the team
admin, and their jobs move into it: who sees which job does not change. Each user's one
token becomes their API token named "default", so that tokens in use keep working.

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-26 12:00:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

LIVE = sa.text("revoked_at IS NULL")


def upgrade() -> None:
    op.create_table(
        "teams",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=100), nullable=False),
        sa.Column("personal_user_id", sa.Integer(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["personal_user_id"], ["users.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("name"),
        sa.UniqueConstraint("personal_user_id"),
    )
    op.create_table(
        "memberships",
        sa.Column("team_id", sa.Integer(), nullable=False),
        sa.Column("user_id", sa.Integer(), nullable=False),
        sa.Column("role", sa.String(length=16), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["team_id"], ["teams.id"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["user_id"], ["users.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("team_id", "user_id"),
    )
    op.create_index("ix_memberships_user_id", "memberships", ["user_id"], unique=False)
    op.create_table(
        "api_tokens",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("user_id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=100), nullable=False),
        sa.Column("token_hash", sa.String(length=64), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("last_used_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(["user_id"], ["users.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("token_hash"),
    )
    op.create_index("ix_api_tokens_user_id", "api_tokens", ["user_id"], unique=False)
    op.create_index(
        "ix_api_tokens_live_name",
        "api_tokens",
        ["user_id", "name"],
        unique=True,
        postgresql_where=LIVE,
        sqlite_where=LIVE,
    )

    op.execute(
        "INSERT INTO teams (name, personal_user_id, created_at) "
        "SELECT name, id, CURRENT_TIMESTAMP FROM users"
    )
    op.execute(
        "INSERT INTO memberships (team_id, user_id, role, created_at) "
        "SELECT id, personal_user_id, 'team_admin', CURRENT_TIMESTAMP FROM teams "
        "WHERE personal_user_id IS NOT NULL"
    )
    op.execute(
        "INSERT INTO api_tokens (user_id, name, token_hash, created_at) "
        "SELECT id, 'default', token_hash, created_at FROM users"
    )

    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("team_id", sa.Integer(), nullable=True))
    op.execute(
        "UPDATE jobs SET team_id = "
        "(SELECT teams.id FROM teams WHERE teams.personal_user_id = jobs.owner_id)"
    )
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.alter_column("team_id", existing_type=sa.Integer(), nullable=False)
        batch_op.create_foreign_key("fk_jobs_team_id_teams", "teams", ["team_id"], ["id"])
        batch_op.create_index(
            "ix_jobs_team_created_id", ["team_id", "created_at", "id"], unique=False
        )

    with op.batch_alter_table("users", schema=None) as batch_op:
        batch_op.drop_column("token_hash")


def downgrade() -> None:
    # Each user keeps the oldest of their live tokens; one with none gets a hash no token has.
    with op.batch_alter_table("users", schema=None) as batch_op:
        batch_op.add_column(sa.Column("token_hash", sa.String(length=64), nullable=True))
    op.execute(
        "UPDATE users SET token_hash = COALESCE("
        "(SELECT api_tokens.token_hash FROM api_tokens WHERE api_tokens.user_id = users.id "
        "AND api_tokens.revoked_at IS NULL ORDER BY api_tokens.id LIMIT 1), "
        "'no-token-' || CAST(users.id AS VARCHAR(20)))"
    )
    with op.batch_alter_table("users", schema=None) as batch_op:
        batch_op.alter_column("token_hash", existing_type=sa.String(length=64), nullable=False)
        batch_op.create_unique_constraint("users_token_hash_key", ["token_hash"])

    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.drop_index("ix_jobs_team_created_id")
        batch_op.drop_constraint("fk_jobs_team_id_teams", type_="foreignkey")
        batch_op.drop_column("team_id")

    op.drop_index("ix_api_tokens_live_name", table_name="api_tokens")
    op.drop_index("ix_api_tokens_user_id", table_name="api_tokens")
    op.drop_table("api_tokens")
    op.drop_index("ix_memberships_user_id", table_name="memberships")
    op.drop_table("memberships")
    op.drop_table("teams")
