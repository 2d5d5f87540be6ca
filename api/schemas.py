"""Response schemas: what the API shows of jobs, events, users."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, Field

from api.json_numbers import whole_number
from api.manifest import unknown_field_warnings
from api.quota_schemas import QuotaPublic
from api.request_body import RequestBody
from storage.models import ApiToken, Job, JobEvent

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
    team: str
    created_at: datetime
    updated_at: datetime
    manifest: dict[str, Any]

    @classmethod
    def of(cls, job: Job, owner: str, team: str) -> JobPublic:
        return cls(
            id=job.id,
            name=job.name,
            state=job.state,
            reason=job.reason,
            learners=job.learners,
            attempt=job.attempt,
            restarts=job.restarts,
            owner=owner,
            team=team,
            created_at=job.created_at,
            updated_at=job.updated_at,
            manifest=without_secrets(job.manifest),
        )


class JobSubmitted(JobPublic):
    """The answer to a submission: the job, and what the manifest says that dlaas will not
    act on (a top-level key neither FfDL nor dlaas reads, most often a typo)."""

    warnings: list[str] = Field(default_factory=list)

    @classmethod
    def submitted(cls, job: Job, owner: str, team: str) -> JobSubmitted:
        public = JobPublic.of(job, owner, team)
        manifest = job.manifest if isinstance(job.manifest, dict) else {}
        return cls(**public.model_dump(), warnings=unknown_field_warnings(manifest))


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


# Users and teams share one namespace (a user's own team bears their name) and one rule.
NAME = re.compile(r"^[a-z][a-z0-9._-]{0,62}$")
NAME_RULE = "1-63 lowercase letters, digits, '.', '_' or '-', starting with a letter"


class UserCreate(RequestBody):  # strict: `"admin": 0` is a mistake, not False
    # The route checks the name, saying the rule in words; the schema states it.
    name: str = Field(json_schema_extra={"pattern": NAME.pattern}, description=NAME_RULE)
    admin: bool = False


RoleName = Literal["viewer", "member", "team_admin"]


class TeamMembership(BaseModel):
    team: str
    role: RoleName
    personal: bool = Field(description="the team made with the user, named after them")


class UserPublic(BaseModel):
    name: str
    admin: bool
    teams: list[TeamMembership] = []


class UserSummary(BaseModel):
    name: str
    admin: bool
    created_at: datetime


class UserList(BaseModel):
    users: list[UserSummary]
    next: NextCursor = None


class UserCreated(BaseModel):
    name: str
    token: str
    admin: bool
    team: str = Field(description="the user's own team, named after them")
    # Set when a node runs every job as one OS user: the new user's jobs and everyone
    # else's can read each other's files there.
    warning: str | None = None


class TeamCreate(RequestBody):
    name: str = Field(json_schema_extra={"pattern": NAME.pattern}, description=NAME_RULE)


class TeamPublic(BaseModel):
    name: str
    personal: bool = Field(description="a user's own team, named after them")
    members: int
    role: RoleName | None = Field(description="the caller's role in it (null: none)")
    created_at: datetime
    quota: QuotaPublic = Field(description="its quota for the scheduler")


class TeamList(BaseModel):
    teams: list[TeamPublic]
    next: NextCursor = None


class MemberAdd(RequestBody):
    user: str = Field(json_schema_extra={"pattern": NAME.pattern}, description="a user's name")
    role: RoleName = "member"


class MemberRole(RequestBody):
    role: RoleName


class MemberPublic(BaseModel):
    user: str
    role: RoleName


class MemberAdded(MemberPublic):
    invited: bool = Field(
        description="true: the user is invited, and becomes a member when they accept "
        "(`POST /v2/invitations/{team}`); the answer is the same whether or not a user of "
        "that name exists. false: a platform admin added them at once"
    )


class InvitationPublic(BaseModel):
    team: str
    role: RoleName
    invited_at: datetime


class InvitationList(BaseModel):
    invitations: list[InvitationPublic]


class MemberList(BaseModel):
    members: list[MemberPublic]
    next: NextCursor = None


MAX_TOKEN_LIFETIME_S = 5 * 366 * 24 * 3600


class TokenCreate(RequestBody):
    name: str = Field(json_schema_extra={"pattern": NAME.pattern}, description=NAME_RULE)
    expires_in: Annotated[int | None, BeforeValidator(whole_number)] = Field(
        None,
        ge=1,
        le=MAX_TOKEN_LIFETIME_S,
        description="seconds until the token stops working; leave out for a token that "
        "works until it is revoked",
    )


class TokenPublic(BaseModel):
    id: int
    name: str
    created_at: datetime
    expires_at: datetime | None
    last_used_at: datetime | None = Field(
        description="when it was last used, to the minute (null: never)"
    )

    @classmethod
    def of(cls, token: ApiToken) -> TokenPublic:
        return cls(
            id=token.id,
            name=token.name,
            created_at=token.created_at,
            expires_at=token.expires_at,
            last_used_at=token.last_used_at,
        )


class TokenCreated(TokenPublic):
    token: str = Field(description="the token itself: shown this once, never again")


class TokenList(BaseModel):
    tokens: list[TokenPublic]
    next: NextCursor = None


class Revoked(BaseModel):
    id: int
    name: str
    revoked: bool = True
