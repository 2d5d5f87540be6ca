"""/v2/jobs/{id}/results: what the job's learners stored in RESULT_DIR."""

from __future__ import annotations

from anyio import to_thread
from fastapi import APIRouter
from fastapi.responses import StreamingResponse

from api.deps import CurrentUser, JobId, SessionDep, StateDep
from api.errors import NotFound
from api.pagination import PageQuery
from api.schemas import FileList
from api.services import jobs as service
from api.services import lists
from storage.object_store import ObjectNotFound

router = APIRouter(prefix="/v2/jobs", tags=["results"])


def results_prefix(job_id: str) -> str:
    return f"jobs/{job_id}/results/"


@router.get("/{job_id}/results", response_model=FileList)
async def list_results(
    job_id: JobId,
    state: StateDep,
    session: SessionDep,
    user: CurrentUser,
    page: PageQuery,
) -> FileList:
    """The job's result files, a page at a time."""
    await service.owned_job(session, user, job_id)
    return await lists.file_list(state.objects, results_prefix(job_id), page)


@router.get("/{job_id}/results/{path:path}", response_model=None)
async def download_result(
    job_id: JobId, path: str, state: StateDep, session: SessionDep, user: CurrentUser
) -> StreamingResponse:
    await service.owned_job(session, user, job_id)
    key = results_prefix(job_id) + path
    missing = NotFound(
        f"job {job_id} has no result {path!r}; `dlaas download {job_id}` fetches them all",
        field="path",
    )
    if ".." in path.split("/"):
        raise missing
    try:
        size = await to_thread.run_sync(state.objects.size, key)
    except (ObjectNotFound, ValueError):
        raise missing from None
    return StreamingResponse(
        state.objects.iter_chunks(key),
        media_type="application/octet-stream",
        headers={"Content-Length": str(size)},
    )
