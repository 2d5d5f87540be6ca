"""/v2/job-objects: the object gateway learners use with their job's token.

Not for users: a learner's runner holds no credential of the object store, only a token
minted for its job (`storage.job_credentials`), and moves the job's archive, data,
checkpoints, logs and results through these routes (`storage.object_store.gateway` is the
client). A token reaches `jobs/{id}/` of its job (read and write) and the data containers
the job's manifest names (read only), and nothing else; it stops working when the job is
halted, finished or deleted. User tokens are refused here, and job tokens everywhere else.

Keys are object-store keys as they are (`jobs/{id}/checkpoints/...`), so one mechanism
serves every store. Bodies stream both ways: an upload goes to the store as it arrives
(a multipart upload on S3, a temporary file on the local store), never held whole.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Annotated, Any

from anyio import from_thread, to_thread
from fastapi import APIRouter, Depends, Header, Path, Query, Request
from fastapi.responses import StreamingResponse
from pydantic import BaseModel

from api.deps import StateDep
from api.errors import DlaasError, Forbidden, NotFound, Unauthorized
from api.pagination import PageQuery, bad_cursor, listing_continuation, listing_cursor
from storage import job_credentials
from storage.job_credentials import JobCredentialRecord, JobScope, OutOfScope, is_job_token
from storage.object_store import BadContinuation, ObjectNotFound

router = APIRouter(prefix="/v2/job-objects", tags=["learner gateway"])

# How long a token's validity is trusted without asking the database again: a job that ends
# loses its learners' access at most this long after.
CREDENTIAL_CACHE_S = 1.0
_CACHE_MAX = 4096
_cache: dict[str, tuple[float, JobCredentialRecord]] = {}

_FIELD = "Authorization"
_HOW = (
    "these routes are for a job's learners: send 'Authorization: Bearer <job token>' with "
    "the DLAAS_JOB_TOKEN the lifecycle manager gave the learner"
)


class JobObject(BaseModel):
    key: str
    size: int


class JobObjectList(BaseModel):
    objects: list[JobObject]
    next: str | None = None


class Deleted(BaseModel):
    deleted: int


async def job_credential(request: Request, state: StateDep) -> JobCredentialRecord:
    """The job whose token the request carries, while that token is valid (else 401)."""
    header = request.headers.get("authorization")
    scheme, _, token = (header or "").partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        raise Unauthorized(f"no job token: {_HOW}", code="missing_token", field=_FIELD)
    if not is_job_token(token):
        raise Unauthorized(
            f"this is not a job token (user tokens do not reach the gateway): {_HOW}",
            code="bad_token",
            field=_FIELD,
        )
    key = job_credentials.hash_job_token(token)
    now = time.monotonic()
    cached = _cache.get(key)
    if cached is not None and cached[0] > now:
        return cached[1]
    async with state.sessions() as session:
        record = await job_credentials.lookup(session, token)
    if record is None:
        _cache.pop(key, None)
        raise Unauthorized(
            "this job token is unknown, or its job was halted, has ended or was deleted",
            code="bad_token",
            field=_FIELD,
        )
    if len(_cache) >= _CACHE_MAX:
        _cache.clear()
    _cache[key] = (now + CREDENTIAL_CACHE_S, record)
    return record


JobCredential = Annotated[JobCredentialRecord, Depends(job_credential)]

ObjectKey = Annotated[
    str,
    Path(
        description="an object key: `jobs/{id}/...` of the token's job, or (to read) "
        "`data/{owner}/{container}/...` of a container its manifest names",
        max_length=1024,
    ),
]
Prefix = Annotated[
    str,
    Query(
        min_length=1,
        max_length=1024,
        pattern=r"^[^\x00]*$",  # no key holds a NUL character
        description="keys starting with this: within `jobs/{id}/` of the token's job, or "
        "(to list) a data container its manifest names",
    ),
]
RangeHeader = Annotated[
    str | None,
    Header(
        alias="Range",
        pattern=r"^bytes=[0-9]{1,18}-$",
        description="`bytes=N-`: the object from byte N on (answered 206)",
    ),
]


def _in_scope(check: Any, value: str, field: str) -> str:
    try:
        return str(check(value, field))
    except OutOfScope as refusal:
        raise Forbidden(refusal.detail, code="out_of_scope", field=field) from None


def _scope(credential: JobCredentialRecord) -> JobScope:
    return credential.scope


@router.get("", response_model=JobObjectList)
async def list_job_objects(
    prefix: Prefix, page: PageQuery, credential: JobCredential, state: StateDep
) -> JobObjectList:
    """The objects under `prefix`, a page at a time."""
    _in_scope(_scope(credential).check_list, prefix, "prefix")
    continuation = listing_continuation(page.cursor) if page.cursor is not None else None
    try:
        listed = await to_thread.run_sync(state.objects.list_page, prefix, page.limit, continuation)
    except BadContinuation:
        raise bad_cursor() from None
    return JobObjectList(
        objects=[JobObject(key=info.key, size=info.size) for info in listed.objects],
        next=listing_cursor(listed.continuation) if listed.continuation is not None else None,
    )


@router.delete("", response_model=Deleted)
async def delete_job_objects(prefix: Prefix, credential: JobCredential, state: StateDep) -> Deleted:
    """Delete every object under `prefix` (within the job's own objects)."""
    _in_scope(_scope(credential).check_delete, prefix, "prefix")
    deleted = await to_thread.run_sync(state.objects.delete_prefix, prefix)
    return Deleted(deleted=deleted)


@router.get(
    "/{key:path}",
    response_model=None,
    response_class=StreamingResponse,
    responses={
        200: {"content": {"application/octet-stream": {}}, "description": "the object"},
        206: {
            "content": {"application/octet-stream": {}},
            "description": "the object from the byte `Range` names on",
        },
        416: {"description": "`Range` starts at or past the object's end"},
    },
)
async def get_job_object(
    key: ObjectKey,
    credential: JobCredential,
    state: StateDep,
    byte_range: RangeHeader = None,
) -> StreamingResponse:
    """The object's bytes, streamed."""
    _in_scope(_scope(credential).check_read, key, "key")
    try:
        size = await to_thread.run_sync(state.objects.size, key)
    except ObjectNotFound:
        raise NotFound(f"no object at key {key!r}", field="key") from None
    start = int(byte_range.removeprefix("bytes=").rstrip("-")) if byte_range else 0
    if byte_range and start >= size:
        raise DlaasError(
            f"Range starts at byte {start}, at or past the end of {key!r} ({size} bytes)",
            code="range_not_satisfiable",
            field="Range",
            status=416,
        )
    headers = {"Content-Length": str(size - start)}
    status = 200
    if byte_range:
        headers["Content-Range"] = f"bytes {start}-{size - 1}/{size}"
        status = 206
    return StreamingResponse(
        state.objects.iter_chunks(key, start=start),
        status_code=status,
        media_type="application/octet-stream",
        headers=headers,
    )


class _BodyReader:
    """The request body as a blocking file, read by the object store in a worker thread:
    each read waits for the chunks it needs from the event loop, so nothing is buffered
    beyond what the store asked for."""

    def __init__(self, chunks: AsyncIterator[bytes]) -> None:
        self._chunks = chunks
        self._buffer = bytearray()
        self._done = False

    async def _next(self) -> bytes | None:
        try:
            return await self._chunks.__anext__()
        except StopAsyncIteration:
            return None

    def read(self, size: int = -1, /) -> bytes:
        while not self._done and (size < 0 or len(self._buffer) < size):
            chunk = from_thread.run(self._next)
            if chunk is None:
                self._done = True
            else:
                self._buffer += chunk
        take = len(self._buffer) if size < 0 else min(size, len(self._buffer))
        data = bytes(self._buffer[:take])
        del self._buffer[:take]
        return data


@router.put(
    "/{key:path}",
    status_code=201,
    response_model=JobObject,
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {"application/octet-stream": {"schema": {"type": "string"}}},
        }
    },
)
async def put_job_object(
    key: ObjectKey, request: Request, credential: JobCredential, state: StateDep
) -> JobObject:
    """Store the body (raw, streamed) at `key`, replacing what was there."""
    _in_scope(_scope(credential).check_write, key, "key")
    reader = _BodyReader(request.stream().__aiter__())
    size = await to_thread.run_sync(state.objects.put_stream, key, reader, None)  # type: ignore[arg-type]
    return JobObject(key=key, size=size)


def forget_credentials() -> None:
    """Drop the cache of validated tokens (tests and the benchmark measure without it)."""
    _cache.clear()
