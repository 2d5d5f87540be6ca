"""SQLAlchemy models: users, their teams and API tokens, jobs, job events, learners,
idempotent requests, data usage, the scheduler's fence."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    String,
    Text,
    text,
)
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column
from sqlalchemy.types import TypeDecorator

from storage.job_states import Desired, LearnerState


def utcnow() -> datetime:
    return datetime.now(UTC)


class UtcDateTime(TypeDecorator[datetime]):
    """A moment stored in UTC and always read back with its offset. PostgreSQL keeps the
    offset itself; SQLite keeps none and hands back naive values, which would reach the API
    as times without an offset (not RFC 3339)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        return _in_utc(value)

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        return _in_utc(value)


def _in_utc(value: datetime | None) -> datetime | None:
    """`value` in UTC; a naive one is taken to be UTC already (how SQLite keeps them)."""
    if value is None:
        return None
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


class Base(DeclarativeBase):
    type_annotation_map = {dict[str, Any]: JSON, datetime: UtcDateTime()}  # noqa: RUF012


class User(Base):
    __tablename__ = "users"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(100), unique=True)
    is_admin: Mapped[bool] = mapped_column(default=False)  # a platform admin
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class Team(Base):
    """Who a job belongs to. Every user gets a team of their own, named after them, when
    they are made (`personal_user_id`); shared teams are made by platform admins."""

    __tablename__ = "teams"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(100), unique=True)
    personal_user_id: Mapped[int | None] = mapped_column(
        ForeignKey("users.id", ondelete="CASCADE"), unique=True, default=None
    )
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    # What the scheduler guarantees the team (nominal) and lets it borrow beyond that of
    # other teams' idle quota; NULL: not limited (`storage.team_quotas`).
    quota_gpus: Mapped[dict[str, int] | None] = mapped_column(JSON, default=None)
    quota_millicpus: Mapped[int | None] = mapped_column(BigInteger, default=None)
    quota_memory: Mapped[int | None] = mapped_column(BigInteger, default=None)
    quota_jobs: Mapped[int | None] = mapped_column(Integer, default=None)
    borrow_gpus: Mapped[dict[str, int] | None] = mapped_column(JSON, default=None)
    borrow_millicpus: Mapped[int | None] = mapped_column(BigInteger, default=None)
    borrow_memory: Mapped[int | None] = mapped_column(BigInteger, default=None)
    borrow_jobs: Mapped[int | None] = mapped_column(Integer, default=None)
    weight: Mapped[float] = mapped_column(Float, default=1.0, server_default=text("1"))
    max_priority: Mapped[int] = mapped_column(Integer, default=0, server_default=text("0"))


class Membership(Base):
    """A user's role in a team (`storage.roles.Role`)."""

    __tablename__ = "memberships"

    team_id: Mapped[int] = mapped_column(
        ForeignKey("teams.id", ondelete="CASCADE"), primary_key=True
    )
    user_id: Mapped[int] = mapped_column(
        ForeignKey("users.id", ondelete="CASCADE"), primary_key=True, index=True
    )
    role: Mapped[str] = mapped_column(String(16))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class Invitation(Base):
    """A team admin's invitation of a user into a team with a role: the user becomes a
    member only when they accept it (`api.services.teams.accept_invitation`)."""

    __tablename__ = "team_invitations"

    team_id: Mapped[int] = mapped_column(
        ForeignKey("teams.id", ondelete="CASCADE"), primary_key=True
    )
    user_id: Mapped[int] = mapped_column(
        ForeignKey("users.id", ondelete="CASCADE"), primary_key=True, index=True
    )
    role: Mapped[str] = mapped_column(String(16))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class ApiToken(Base):
    """A user's named bearer token (only its hash is kept). A revoked token keeps its row,
    so that a request with it is told it was revoked; its name is free again."""

    __tablename__ = "api_tokens"
    __table_args__ = (
        Index(
            "ix_api_tokens_live_name",
            "user_id",
            "name",
            unique=True,
            postgresql_where=text("revoked_at IS NULL"),
            sqlite_where=text("revoked_at IS NULL"),
        ),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    name: Mapped[str] = mapped_column(String(100))
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    expires_at: Mapped[datetime | None] = mapped_column(default=None)
    # written at most once a minute per token (`storage.api_tokens.LAST_USED_RESOLUTION`)
    last_used_at: Mapped[datetime | None] = mapped_column(default=None)
    revoked_at: Mapped[datetime | None] = mapped_column(default=None)


class Job(Base):
    __tablename__ = "jobs"
    # Serve a user's and a team's job lists, newest first and paged by (created_at, id).
    __table_args__ = (
        Index("ix_jobs_owner_created_id", "owner_id", "created_at", "id"),
        Index("ix_jobs_team_created_id", "team_id", "created_at", "id"),
    )

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    owner_id: Mapped[int] = mapped_column(ForeignKey("users.id"), index=True)
    # the team the job belongs to: its members act on it, its viewers read it
    team_id: Mapped[int] = mapped_column(ForeignKey("teams.id"))
    name: Mapped[str] = mapped_column(String(100))
    state: Mapped[str] = mapped_column(String(16), index=True)
    reason: Mapped[str] = mapped_column(Text, default="")
    # What the user asked for ("run", "halt", "delete"); the lifecycle manager drives the
    # cluster towards it, and ignores learner exits it caused itself.
    desired: Mapped[str] = mapped_column(String(8), default=Desired.RUN.value)
    learners: Mapped[int] = mapped_column(Integer)
    attempt: Mapped[int] = mapped_column(Integer, default=0)
    restarts: Mapped[int] = mapped_column(Integer, default=0)
    manifest: Mapped[dict[str, Any]] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow)
    deleted_at: Mapped[datetime | None] = mapped_column(default=None)
    # What its results take in the object store, counted once the job is final.
    results_bytes: Mapped[int] = mapped_column(BigInteger, default=0)


class JobEvent(Base):
    __tablename__ = "job_events"
    # Serves a job's events in order, paged by id.
    __table_args__ = (Index("ix_job_events_job_id_id", "job_id", "id"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    job_id: Mapped[str] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"))
    time: Mapped[datetime] = mapped_column(default=utcnow)
    kind: Mapped[str] = mapped_column(String(32))
    from_state: Mapped[str | None] = mapped_column(String(16), default=None)
    to_state: Mapped[str | None] = mapped_column(String(16), default=None)
    reason: Mapped[str] = mapped_column(Text, default="")
    detail: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)


class Learner(Base):
    __tablename__ = "learners"

    job_id: Mapped[str] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), primary_key=True)
    index: Mapped[int] = mapped_column(Integer, primary_key=True)
    attempt: Mapped[int] = mapped_column(Integer, default=0)
    state: Mapped[str] = mapped_column(String(16), default=LearnerState.PENDING.value)
    exit_code: Mapped[int | None] = mapped_column(Integer, default=None)
    # how it exited, so a failure decided later from the row is classed as it was reported
    signal: Mapped[str | None] = mapped_column(String(16), default=None)
    oom_killed: Mapped[bool | None] = mapped_column(Boolean, default=None)
    # why a failed learner failed (`restart_policy.Cause`) and the program's last line, so
    # that any process deciding later from the row decides as the one that saw the report
    cause: Mapped[str | None] = mapped_column(String(16), default=None)
    last_line: Mapped[str] = mapped_column(Text, default="", server_default="")
    reason: Mapped[str] = mapped_column(Text, default="")
    updated_at: Mapped[datetime] = mapped_column(default=utcnow)


class IdempotentRequest(Base):
    """A POST sent with an `Idempotency-Key`: claimed while it runs, then its answer, which a
    retry with the same key gets back instead of a second effect."""

    __tablename__ = "idempotent_requests"

    # sha256 of the credentials the request came with: keys are scoped to who sent them.
    scope: Mapped[str] = mapped_column(String(64), primary_key=True)
    key: Mapped[str] = mapped_column(String(255), primary_key=True)
    method: Mapped[str] = mapped_column(String(8))
    path: Mapped[str] = mapped_column(Text)
    state: Mapped[str] = mapped_column(String(8), default="pending")
    fingerprint: Mapped[str | None] = mapped_column(String(64), default=None)
    status: Mapped[int | None] = mapped_column(Integer, default=None)
    headers: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    body: Mapped[bytes] = mapped_column(LargeBinary, default=b"")
    created_at: Mapped[datetime] = mapped_column(default=utcnow, index=True)


class DataUsage(Base):
    """What a user's data containers take in the object store, kept up to date by uploads."""

    __tablename__ = "data_usage"

    user_id: Mapped[int] = mapped_column(
        ForeignKey("users.id", ondelete="CASCADE"), primary_key=True
    )
    data_bytes: Mapped[int] = mapped_column(BigInteger, default=0)


class JobCredential(Base):
    """A bearer token minted for one job's learners (only its hash is kept): it reaches the
    job's own objects and the data containers its manifest names, and only while the job
    runs (`storage.job_credentials`)."""

    __tablename__ = "job_credentials"
    # The monitor reads the live tokens every second (`job_credentials.live_token_hashes`).
    __table_args__ = (
        Index(
            "ix_job_credentials_live",
            "job_id",
            postgresql_where=text("revoked_at IS NULL"),
            sqlite_where=text("revoked_at IS NULL"),
        ),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    job_id: Mapped[str] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), index=True)
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    revoked_at: Mapped[datetime | None] = mapped_column(default=None)


class SchedulerFence(Base):
    """One row: the newest scheduler lease's fencing token that applied decisions
    (`storage.scheduler_fence`)."""

    __tablename__ = "scheduler_fence"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    token: Mapped[int] = mapped_column(BigInteger, default=0)
