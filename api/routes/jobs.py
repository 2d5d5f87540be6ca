"""/v2/jobs: submit, list, show, halt, resume, delete, events."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request, Response
from starlette.datastructures import UploadFile

from api.deps import CurrentUser, JobId, SessionDep, StateDep
from api.errors import DlaasError, Invalid, TooLarge
from api.schemas import EventList, EventPublic, JobList, JobPublic
from api.services import jobs as service

router = APIRouter(prefix="/v2/jobs", tags=["jobs"])

_MANIFEST_MAX = 64 * 1024
_FORM_FIELDS = ("manifest", "model")
_SUBMIT_BODY: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "content": {
            "multipart/form-data": {
                "schema": {
                    "type": "object",
                    "required": list(_FORM_FIELDS),
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


async def _form_file(form: Any, name: str, what: str) -> UploadFile:
    value = form.get(name)
    if not isinstance(value, UploadFile):
        raise Invalid(
            f"the multipart form has no file field {name!r}: send {what} as {name}=@FILE",
            code="missing_field",
            field=name,
        )
    return value


def _refuse_unknown_fields(form: Any) -> None:
    for name in form:
        if name not in _FORM_FIELDS:
            raise Invalid(
                f"the multipart form has a field {name!r} that a submission does not take: "
                "send only manifest and model",
                code="unknown_field",
                field=name,
            )


@router.post("", status_code=201, response_model=JobPublic, openapi_extra=_SUBMIT_BODY)
async def submit_job(
    request: Request, response: Response, state: StateDep, user: CurrentUser
) -> JobPublic:
    """Submit a job: multipart with `manifest` (YAML) and `model` (zip of the training code)."""
    limit = state.archive_limits.max_bytes + _MANIFEST_MAX + 64 * 1024
    length = request.headers.get("content-length")
    if length is None or not length.isdigit():
        raise DlaasError(
            "send the upload with a Content-Length header", code="length_required", status=411
        )
    if int(length) > limit:
        raise TooLarge(
            f"the upload is {int(length)} bytes, over the limit of {limit}: "
            "leave data and checkpoints out of the model archive (upload data with "
            "`dlaas data upload`)",
            code="archive_too_large",
            field="model",
        )
    if not request.headers.get("content-type", "").startswith("multipart/form-data"):
        raise Invalid(
            "send multipart/form-data with the fields manifest and model",
            code="not_multipart",
            field="body",
        )
    async with request.form(max_files=4, max_fields=4) as form:
        _refuse_unknown_fields(form)
        manifest = await _form_file(form, "manifest", "the manifest YAML")
        model = await _form_file(form, "model", "the model zip")
        manifest_text = await manifest.read(_MANIFEST_MAX + 1)
        job = await service.submit_job(state, user, manifest_text, model.file, model.size or 0)
    response.headers["Location"] = f"/v2/jobs/{job.id}"
    return JobPublic.of(job, user.name)


@router.get("", response_model=JobList)
async def list_jobs(session: SessionDep, user: CurrentUser) -> JobList:
    jobs = await service.list_jobs(session, user)
    return JobList(jobs=[JobPublic.of(job, user.name) for job in jobs])


@router.get("/{job_id}", response_model=JobPublic)
async def get_job(job_id: JobId, session: SessionDep, user: CurrentUser) -> JobPublic:
    return JobPublic.of(await service.owned_job(session, user, job_id), user.name)


@router.post("/{job_id}/halt", status_code=202, response_model=JobPublic)
async def halt_job(
    job_id: JobId, state: StateDep, session: SessionDep, user: CurrentUser
) -> JobPublic:
    return JobPublic.of(await service.halt_job(state, session, user, job_id), user.name)


@router.post("/{job_id}/resume", status_code=202, response_model=JobPublic)
async def resume_job(
    job_id: JobId, state: StateDep, session: SessionDep, user: CurrentUser
) -> JobPublic:
    return JobPublic.of(await service.resume_job(state, session, user, job_id), user.name)


@router.delete("/{job_id}", status_code=202)
async def delete_job(
    job_id: JobId, state: StateDep, session: SessionDep, user: CurrentUser
) -> dict[str, str]:
    await service.delete_job(state, session, user, job_id)
    return {"id": job_id, "status": "deleting"}


@router.get("/{job_id}/events", response_model=EventList)
async def job_events(job_id: JobId, session: SessionDep, user: CurrentUser) -> EventList:
    events = await service.job_events(session, user, job_id)
    return EventList(events=[EventPublic.of(event) for event in events])
