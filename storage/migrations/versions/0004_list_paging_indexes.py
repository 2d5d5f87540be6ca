"""indexes that serve paged lists: a user's jobs by (created_at, id), a job's events by id

Each page of a list is a keyset query (`WHERE (created_at, id) < last ORDER BY ... LIMIT`);
these indexes let it start where the page before ended instead of sorting the whole list.
They replace the narrower indexes they extend.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-25 19:00:00.000000
"""

from __future__ import annotations

from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.create_index(
            "ix_jobs_owner_created_id", ["owner_id", "created_at", "id"], unique=False
        )
        batch_op.drop_index("ix_jobs_owner_created")
    with op.batch_alter_table("job_events", schema=None) as batch_op:
        batch_op.create_index("ix_job_events_job_id_id", ["job_id", "id"], unique=False)
        batch_op.drop_index("ix_job_events_job_id")


def downgrade() -> None:
    with op.batch_alter_table("job_events", schema=None) as batch_op:
        batch_op.create_index("ix_job_events_job_id", ["job_id"], unique=False)
        batch_op.drop_index("ix_job_events_job_id_id")
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.create_index("ix_jobs_owner_created", ["owner_id", "created_at"], unique=False)
        batch_op.drop_index("ix_jobs_owner_created_id")
