"""FfDL's /v1/models: submit, list, show, halt or resume, delete, and fetch a model's code
and its trained model, each a translation over /v2's services (`api.ffdl_v1`).

The routes are left out of /openapi.json, which states /v2's contract: /v1 follows FfDL's
own specification, which its clients were generated from.
"""

from __future__ import annotations

from anyio import to_thread
from fastapi import APIRouter, Request, Response
from fastapi.responses import StreamingResponse

from api.deps import SessionDep, StateDep
from api.errors import NotFound
from api.ffdl_v1.access import ModelAccess, V1Allowed, Version
from api.ffdl_v1.mapping import model_location, model_of, patch_action
from api.ffdl_v1.schemas import BasicModel, BasicNewModel, Model, ModelList, TrainingUpdate
from api.idempotency import claim_of
from api.pagination import MAX_LIMIT, PageRequest
from api.services import jobs as service
from api.services import lists
from api.services.lists import JobSearch
from api.services.results_archive import chunks_of, zip_results
from api.submission_form import answer_stored_with_job, check_framing, submitted_files
from storage.job_states import JobState
from storage.models import Job
from storage.object_store import ObjectNotFound

router = APIRouter(prefix="/v1/models", tags=["v1"], include_in_schema=False)

_FORM_FIELDS = ("manifest", "model_definition")


def _new_model(job: Job) -> BasicNewModel:
    return BasicNewModel(model_id=job.id, location=model_location(job.id))


def _answer(job: Job, _team: str) -> tuple[int, bytes, dict[str, str]]:
    body = _new_model(job).model_dump_json().encode()
    return 201, body, {"content-type": "application/json", "location": model_location(job.id)}


@router.post("", status_code=201, response_model=BasicNewModel)
async def post_model(
    request: Request, response: Response, state: StateDep, user: V1Allowed, version: Version = None
) -> BasicNewModel:
    """Train a model: multipart with `manifest` (FfDL's manifest.yml) and
    `model_definition` (a zip of the training code), as FfDL's CLI sends them."""
    check_framing(request, "manifest and model_definition")
    async with request.form(max_files=4, max_fields=4) as form:
        manifest, model = await submitted_files(form, _FORM_FIELDS, "model_definition")
        submission = service.Submission(
            manifest,
            model.file,
            model.size or 0,
            archive_field="model_definition",
        )
        job, _team = await service.submit_job(
            state,
            user,
            submission,
            on_created=answer_stored_with_job(claim_of(request.state), _answer),
        )
    response.headers["Location"] = model_location(job.id)
    return _new_model(job)


@router.get("", response_model=ModelList)
async def list_models(session: SessionDep, user: V1Allowed, version: Version = None) -> ModelList:
    """Every model the caller sees, newest first: FfDL's list is not paged, so every page
    of /v2's list is read."""
    models: list[Model] = []
    cursor = None
    while True:
        page = await lists.list_jobs(session, user, JobSearch(), PageRequest(MAX_LIMIT, cursor))
        models.extend(model_of(job) for job in page.jobs)
        if page.next is None:
            return ModelList(models=models)
        cursor = page.next


@router.get("/{model_id}", response_model=Model)
async def get_model(access: ModelAccess, session: SessionDep, version: Version = None) -> Model:
    [job] = await lists.public_jobs(session, [access.job])
    return model_of(job)


@router.patch("/{model_id}", status_code=202, response_model=BasicModel)
async def patch_model(
    update: TrainingUpdate,
    access: ModelAccess,
    state: StateDep,
    session: SessionDep,
    version: Version = None,
) -> BasicModel:
    """`{"status": "halt"}` halts the training (its last checkpoint is kept),
    `{"status": "resume"}` runs a halted one again."""
    job_id = access.job.id
    if patch_action(update.status) == "halt":
        await service.halt_job(state, session, access.principal, job_id)
    else:
        await service.resume_job(state, session, access.principal, job_id)
    return BasicModel(model_id=job_id)


@router.delete("/{model_id}", response_model=BasicModel)
async def delete_model(
    access: ModelAccess, state: StateDep, session: SessionDep, version: Version = None
) -> BasicModel:
    """The model is gone at once (its learners stop, what it stored is removed); FfDL's
    specification answers 200."""
    await service.delete_job(state, session, access.principal, access.job.id)
    return BasicModel(model_id=access.job.id)


@router.get("/{model_id}/definition", response_class=StreamingResponse)
async def download_model_definition(
    access: ModelAccess, state: StateDep, version: Version = None
) -> StreamingResponse:
    """The model code zip the training was submitted with."""
    key = service.model_key(access.job.id)
    try:
        size = await to_thread.run_sync(state.objects.size, key)
    except ObjectNotFound:
        raise NotFound(
            f"model {access.job.id} has no stored code: its archive was removed",
            field="model_id",
        ) from None
    return StreamingResponse(
        state.objects.iter_chunks(key),
        media_type="application/octet-stream",
        headers={
            "Content-Length": str(size),
            "Content-Disposition": f'attachment; filename="{access.job.id}-definition.zip"',
        },
    )


@router.get("/{model_id}/trained_model", response_class=StreamingResponse)
async def download_trained_model(
    access: ModelAccess, state: StateDep, version: Version = None
) -> StreamingResponse:
    """The files the training stored in RESULT_DIR, as one zip archive."""
    job = access.job
    archive = await to_thread.run_sync(zip_results, state.objects, job.id)
    if archive is None:
        when = (
            "it stored none"
            if job.state == JobState.COMPLETED
            else f"it is {job.state}; they are there once it has stored them"
        )
        raise NotFound(
            f"model {job.id} has no trained model: {when} (the training writes them to "
            "$RESULT_DIR)",
            field="model_id",
        )
    return StreamingResponse(
        chunks_of(archive),
        media_type="application/octet-stream",
        headers={"Content-Disposition": f'attachment; filename="{job.id}-trained-model.zip"'},
    )
