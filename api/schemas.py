"""Response schemas: what the API shows of jobs, events, users."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field

from storage.models import Job, JobEvent

NextCursor = Annotated[
    str | None,
    Field(description="Pass it as `cursor` for the next page; null on the last page."),
]

SECRET_KEYS = frozenset({"password", "secret", "secret_key", "secret_access_key", "token"})


def without_secrets(value: Any) -> Any:
    if isinstance(value, dict):
        return {
            k: ("***" if k.lower() in SECRET_KEYS else without_secrets(v)) for k, v in value.items()
        }
    if isinstance(value, list):
        return [without_secrets(v) for v in value]
    return value


class JobPublic(BaseModel):
    id: str
    name: str
    state: str
    reason: str
    learners: int
    attempt: int
    restarts: int
    owner: str
    created_at: datetime
    updated_at: datetime
    manifest: dict[str, Any]

    @classmethod
    def of(cls, job: Job, owner: str) -> JobPublic:
        return cls(
            id=job.id,
            name=job.name,
            state=job.state,
            reason=job.reason,
            learners=job.learners,
            attempt=job.attempt,
            restarts=job.restarts,
            owner=owner,
            created_at=job.created_at,
            updated_at=job.updated_at,
            manifest=without_secrets(job.manifest),
        )


class JobList(BaseModel):
    jobs: list[JobPublic]
    next: NextCursor = None


class EventPublic(BaseModel):
    time: datetime
    kind: str
    from_state: str | None
    to_state: str | None
    reason: str
    detail: dict[str, Any]

    @classmethod
    def of(cls, event: JobEvent) -> EventPublic:
        return cls(
            time=event.time,
            kind=event.kind,
            from_state=event.from_state,
            to_state=event.to_state,
            reason=event.reason,
            detail=event.detail,
        )


class EventList(BaseModel):
    events: list[EventPublic]
    next: NextCursor = None


class UsagePublic(BaseModel):
    data_bytes: int
    results_bytes: int
    used_bytes: int
    quota_bytes: int | None
    left_bytes: int | None


class FileInfo(BaseModel):
    path: str
    size: int


class FileList(BaseModel):
    files: list[FileInfo]
    next: NextCursor = None


class MetricPoint(BaseModel):
    learner: int
    time: float
    step: int | None
    values: dict[str, float]


class MetricList(BaseModel):
    metrics: list[MetricPoint]
    next: NextCursor = None  # only when paged (limit or cursor given)


USER_NAME = re.compile(r"^[a-z][a-z0-9._-]{0,62}$")


class UserCreate(BaseModel):
    model_config = ConfigDict(strict=True)  # `"admin": 0` is a mistake, not False

    # The route checks the name, saying the rule in words; the schema states it.
    name: str = Field(
        json_schema_extra={"pattern": USER_NAME.pattern},
        description="1-63 lowercase letters, digits, '.', '_' or '-', starting with a letter",
    )
    admin: bool = False


class UserPublic(BaseModel):
    name: str
    admin: bool


class UserCreated(BaseModel):
    name: str
    token: str
    admin: bool
    # Set when a node runs every job as one OS user: the new user's jobs and everyone
    # else's can read each other's files there.
    warning: str | None = None
