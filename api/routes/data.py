"""/v2/data: training data a user uploads once and names in manifests' data_stores."""

from __future__ import annotations

import re
import tempfile
from typing import Annotated, BinaryIO, cast

from anyio import to_thread
from fastapi import APIRouter, Path, Request

from api.access import Allowed
from api.deps import StateDep
from api.errors import Invalid
from api.pagination import PageQuery
from api.schemas import FileInfo, FileList
from api.services import lists, quota
from storage.object_store import ObjectNotFound, ObjectStore
from storage.training_data import CONTAINER_NAME, CONTAINER_RULE, data_prefix
from storage.usage import add_data_bytes

router = APIRouter(prefix="/v2/data", tags=["data"])

# Segments of 1-255 of these characters, none of them "." or ".."
_SEGMENT = r"(?!\.\.?(?:/|$))[A-Za-z0-9._ +@=-]{1,255}"
_DATA_PATH = re.compile(rf"^{_SEGMENT}(?:/{_SEGMENT})*$")

# The schema states the rules the checks below enforce; the checks stay in the route, as
# their refusals say the rule in words.
ContainerName = Annotated[
    str,
    Path(
        json_schema_extra={"pattern": CONTAINER_NAME.pattern},
        description=CONTAINER_RULE,
    ),
]
DataPath = Annotated[
    str,
    Path(
        json_schema_extra={"pattern": _DATA_PATH.pattern},
        description="a relative path of letters, digits and '._-+@= ', without '.' or '..' "
        "segments",
    ),
]


def _check_container(container: str) -> None:
    if not CONTAINER_NAME.fullmatch(container):
        raise Invalid(
            f"container {container!r} is not a valid name: use {CONTAINER_RULE}",
            code="invalid_container",
            field="container",
        )


def _check_path(path: str) -> None:
    if not _DATA_PATH.fullmatch(path):
        raise Invalid(
            f"data path {path!r} is not allowed: use relative paths of letters, digits and "
            "'._-+@= ' without '..' or empty segments",
            code="invalid_path",
            field="path",
        )


@router.put("/{container}/{path:path}", status_code=201, response_model=FileInfo)
async def upload_data(
    container: ContainerName,
    path: DataPath,
    request: Request,
    state: StateDep,
    user: Allowed,
) -> FileInfo:
    """Upload one file of training data (raw body, streamed)."""
    _check_container(container)
    _check_path(path)
    key = data_prefix(user.id, container) + path
    replaced = await to_thread.run_sync(_size_if_stored, state.objects, key)
    declared = request.headers.get("content-length", "")
    if declared.isdigit():  # refused before the body is read
        await quota.check_room(state, user, int(declared) - replaced, f"uploading {path}")
    with tempfile.SpooledTemporaryFile(max_size=8 * 1024 * 1024) as spool:
        async for chunk in request.stream():
            await to_thread.run_sync(spool.write, chunk)
        size = spool.tell()
        if not declared.isdigit():  # a chunked body: its size is known now
            await quota.check_room(state, user, size - replaced, f"uploading {path}")
        spool.seek(0)
        stream = cast(BinaryIO, spool)
        await to_thread.run_sync(state.objects.put_stream, key, stream, None)
    async with state.sessions() as session:
        await add_data_bytes(session, user.id, size - replaced)
    return FileInfo(path=path, size=size)


def _size_if_stored(objects: ObjectStore, key: str) -> int:
    try:
        return objects.size(key)
    except ObjectNotFound:
        return 0


@router.get("/{container}", response_model=FileList)
async def list_data(
    container: ContainerName,
    state: StateDep,
    user: Allowed,
    page: PageQuery,
) -> FileList:
    """The files of one of your data containers, a page at a time."""
    _check_container(container)
    return await lists.file_list(state.objects, data_prefix(user.id, container), page)
