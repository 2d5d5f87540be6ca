"""/v2/jobs/{id}/results and /checkpoints: the files a job's learners stored in RESULT_DIR
and the checkpoints they committed, listed a page at a time and downloaded one by one."""

from __future__ import annotations

from dataclasses import dataclass

from anyio import to_thread
from fastapi import APIRouter
from fastapi.responses import StreamingResponse

from api.access import JobAccess
from api.deps import JobId, StateDep
from api.errors import NotFound
from api.pagination import PageQuery
from api.schemas import FileList
from api.services import lists
from storage.object_store import ObjectNotFound

router = APIRouter(prefix="/v2/jobs", tags=["results"])


@dataclass(frozen=True)
class JobFiles:
    """One kind of file a job keeps under `jobs/{id}/{folder}/`."""

    folder: str
    what: str  # a file of this kind, as a sentence names it
    fetch_all: str  # the command that fetches them all

    def prefix(self, job_id: str) -> str:
        return f"jobs/{job_id}/{self.folder}/"

    async def listing(self, job_id: str, state: StateDep, page: PageQuery) -> FileList:
        return await lists.file_list(state.objects, self.prefix(job_id), page)

    async def download(self, job_id: str, path: str, state: StateDep) -> StreamingResponse:
        missing = NotFound(
            f"job {job_id} has no {self.what} {path!r}; {self.fetch_all.format(job=job_id)}",
            field="path",
        )
        if ".." in path.split("/"):
            raise missing
        key = self.prefix(job_id) + path
        try:
            size = await to_thread.run_sync(state.objects.size, key)
        except (ObjectNotFound, ValueError):
            raise missing from None
        return StreamingResponse(
            state.objects.iter_chunks(key),
            media_type="application/octet-stream",
            headers={"Content-Length": str(size)},
        )


RESULTS = JobFiles("results", "result", "`dlaas download {job}` fetches them all")
CHECKPOINTS = JobFiles(
    "checkpoints", "checkpoint file", "`GET /v2/jobs/{job}/checkpoints` lists them"
)


@router.get("/{job_id}/results", response_model=FileList)
async def list_results(
    job_id: JobId, access: JobAccess, state: StateDep, page: PageQuery
) -> FileList:
    """The job's result files, a page at a time."""
    return await RESULTS.listing(job_id, state, page)


@router.get("/{job_id}/results/{path:path}", response_model=None)
async def download_result(
    job_id: JobId, path: str, access: JobAccess, state: StateDep
) -> StreamingResponse:
    return await RESULTS.download(job_id, path, state)


@router.get("/{job_id}/checkpoints", response_model=FileList)
async def list_checkpoints(
    job_id: JobId, access: JobAccess, state: StateDep, page: PageQuery
) -> FileList:
    """The files of the job's checkpoints, a page at a time: `{name}/...` for the job's
    series, `learner-{n}/{name}/...` for a learner's own; a checkpoint whose `COMMITTED`
    file is listed was stored whole."""
    return await CHECKPOINTS.listing(job_id, state, page)


@router.get("/{job_id}/checkpoints/{path:path}", response_model=None)
async def download_checkpoint_file(
    job_id: JobId, path: str, access: JobAccess, state: StateDep
) -> StreamingResponse:
    return await CHECKPOINTS.download(job_id, path, state)
