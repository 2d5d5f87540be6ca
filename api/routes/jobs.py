"""/v2/jobs: submit, list, show, halt, resume, delete, events."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request, Response
from pydantic import BeforeValidator
from sqlalchemy.ext.asyncio import AsyncSession

from api.access import Allowed, JobAccess
from api.deps import JobId, SessionDep, StateDep
from api.errors import Invalid
from api.idempotency import claim_of
from api.pagination import PageQuery
from api.schemas import NAME, NAME_RULE, EventList, JobList, JobPublic, JobSubmitted
from api.services import jobs as service
from api.services import lists
from api.services.lists import JobSearch
from api.submission_form import Answer, answer_stored_with_job, check_framing, submitted_files
from storage.job_states import JobState
from storage.models import Job

router = APIRouter(prefix="/v2/jobs", tags=["jobs"])

StatesFilter = Annotated[
    tuple[str, ...],
    Query(
        description="Only jobs in these states; repeat it for several.",
        json_schema_extra={"items": {"type": "string", "enum": [s.value for s in JobState]}},
    ),
]
# No stored name holds a NUL character (PostgreSQL's text cannot).
_NO_NUL = r"^[^\x00]*$"
NameFilter = Annotated[
    str | None,
    Query(
        min_length=1,
        max_length=100,
        pattern=_NO_NUL,
        description="Only jobs whose name contains this text, ignoring case.",
    ),
]
OwnerFilter = Annotated[
    str | None,
    Query(
        min_length=1,
        max_length=100,
        pattern=_NO_NUL,
        description="Only this user's jobs (among those of your teams).",
    ),
]
TeamFilter = Annotated[
    str | None,
    Query(
        min_length=1,
        max_length=100,
        pattern=_NO_NUL,
        description="Only this team's jobs (one of your teams: any other gives an empty list).",
    ),
]
_ISO_TIME = re.compile(
    r"^\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(:\d{2}(\.\d{1,6})?)?(Z|[+-]\d{2}:\d{2})?$"
)


def _iso_time(value: object) -> object:
    """A time as ISO 8601 text only: pydantic alone would read `0.5` as a Unix time."""
    if isinstance(value, str) and not _ISO_TIME.match(value):
        raise ValueError("must be an ISO 8601 time such as 2026-11-25T12:00:00Z")
    return value


CreatedBefore = Annotated[
    datetime | None,
    BeforeValidator(_iso_time),
    Query(
        description="Only jobs created before this ISO 8601 time (UTC if it has no zone).",
        json_schema_extra={"pattern": _ISO_TIME.pattern},
    ),
]
CreatedAfter = Annotated[
    datetime | None,
    BeforeValidator(_iso_time),
    Query(
        description="Only jobs created after this ISO 8601 time (UTC if it has no zone).",
        json_schema_extra={"pattern": _ISO_TIME.pattern},
    ),
]

_FORM_FIELDS = ("manifest", "model", "team")
_REQUIRED_FIELDS = ("manifest", "model")
_SUBMIT_BODY: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "content": {
            "multipart/form-data": {
                "schema": {
                    "type": "object",
                    "required": list(_REQUIRED_FIELDS),
                    "properties": {
                        "manifest": {
                            "type": "string",
                            "format": "binary",
                            "description": "the manifest, YAML",
                        },
                        "model": {
                            "type": "string",
                            "format": "binary",
                            "description": "the training code, a zip archive",
                        },
                        "team": {
                            "type": "string",
                            "pattern": NAME.pattern,
                            "description": "the team the job belongs to; leave it out for "
                            "your own team (or the one team you may submit to)",
                        },
                    },
                    "additionalProperties": False,
                },
                "encoding": {
                    "manifest": {"contentType": "application/yaml"},
                    "model": {"contentType": "application/zip"},
                },
            }
        },
    }
}


def _team_field(form: Any) -> str | None:
    value = form.get("team")
    if value is None:
        return None
    if not isinstance(value, str) or not NAME.fullmatch(value):
        raise Invalid(f"team must be a team's name: {NAME_RULE}", field="team")
    return value


@router.post("", status_code=201, response_model=JobSubmitted, openapi_extra=_SUBMIT_BODY)
async def submit_job(
    request: Request, response: Response, state: StateDep, user: Allowed
) -> JobSubmitted:
    """Submit a job: multipart with `manifest` (YAML) and `model` (zip of the training code).
    The body limit (the archive's and the manifest's, and the form's framing) is enforced by
    `api.body_limit` before the body is read."""
    check_framing(request, "manifest and model")
    async with request.form(max_files=4, max_fields=4) as form:
        manifest, model = await submitted_files(form, _FORM_FIELDS, "model")
        submission = service.Submission(manifest, model.file, model.size or 0, _team_field(form))
        job, team = await service.submit_job(
            state,
            user,
            submission,
            on_created=answer_stored_with_job(claim_of(request.state), _answer(user.name)),
        )
    response.headers["Location"] = _location(job.id)
    return JobSubmitted.submitted(job, user.name, team)


def _location(job_id: str) -> str:
    return f"/v2/jobs/{job_id}"


def _answer(owner: str) -> Answer:
    def answer(job: Job, team: str) -> tuple[int, bytes, dict[str, str]]:
        body = JobSubmitted.submitted(job, owner, team).model_dump_json().encode()
        return 201, body, {"content-type": "application/json", "location": _location(job.id)}

    return answer


@router.get("", response_model=JobList)
async def list_jobs(
    session: SessionDep,
    user: Allowed,
    page: PageQuery,
    state: StatesFilter = (),
    name: NameFilter = None,
    owner: OwnerFilter = None,
    team: TeamFilter = None,
    created_before: CreatedBefore = None,
    created_after: CreatedAfter = None,
) -> JobList:
    """The jobs of your teams (a platform admin: every job), newest first, a page at a time.
    Filters combine; a cursor is a position in the newest-first order, so with other filters
    it goes on from there under those."""
    search = JobSearch(
        states=state,
        name=name,
        owner=owner,
        team=team,
        created_before=created_before,
        created_after=created_after,
    )
    return await lists.list_jobs(session, user, search, page)


async def _public(session: AsyncSession, job: Job) -> JobPublic:
    [shown] = await lists.public_jobs(session, [job])
    return shown


@router.get("/{job_id}", response_model=JobPublic)
async def get_job(access: JobAccess, session: SessionDep) -> JobPublic:
    return await _public(session, access.job)


@router.post("/{job_id}/halt", status_code=202, response_model=JobPublic)
async def halt_job(
    job_id: JobId, access: JobAccess, state: StateDep, session: SessionDep
) -> JobPublic:
    job = await service.halt_job(state, session, access.principal, job_id)
    return await _public(session, job)


@router.post("/{job_id}/resume", status_code=202, response_model=JobPublic)
async def resume_job(
    job_id: JobId, access: JobAccess, state: StateDep, session: SessionDep
) -> JobPublic:
    job = await service.resume_job(state, session, access.principal, job_id)
    return await _public(session, job)


@router.delete("/{job_id}", status_code=202)
async def delete_job(
    job_id: JobId, access: JobAccess, state: StateDep, session: SessionDep
) -> dict[str, str]:
    await service.delete_job(state, session, access.principal, job_id)
    return {"id": job_id, "status": "deleting"}


@router.get("/{job_id}/events", response_model=EventList)
async def job_events(
    job_id: JobId, access: JobAccess, session: SessionDep, page: PageQuery
) -> EventList:
    """The job's events, oldest first, a page at a time."""
    return await lists.job_events(session, job_id, page)
