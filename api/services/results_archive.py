"""A job's results (`jobs/{id}/results/...`) as one zip archive, for clients that fetch a
trained model whole (FfDL's `GET /v1/models/{id}/trained_model`)."""

from __future__ import annotations

import tempfile
import zipfile
from collections.abc import Iterator
from typing import IO

from storage.object_store import ObjectStore

# Archives up to this size stay in memory; larger ones spill to a temporary file.
_IN_MEMORY_BYTES = 16 * 1024 * 1024
_CHUNK_BYTES = 1 << 20


def results_prefix(job_id: str) -> str:
    return f"jobs/{job_id}/results/"


def zip_results(objects: ObjectStore, job_id: str) -> IO[bytes] | None:
    """The job's result files zipped (paths relative to its results), rewound; None when it
    stored none. Blocking: run it in a worker thread."""
    prefix = results_prefix(job_id)
    spool = tempfile.SpooledTemporaryFile(max_size=_IN_MEMORY_BYTES)  # noqa: SIM115
    count = 0
    with zipfile.ZipFile(spool, "w", zipfile.ZIP_DEFLATED) as archive:
        for info in objects.list(prefix):
            with archive.open(info.key[len(prefix) :], "w", force_zip64=True) as member:
                for chunk in objects.iter_chunks(info.key):
                    member.write(chunk)
            count += 1
    if count == 0:
        spool.close()
        return None
    spool.seek(0)
    return spool


def chunks_of(archive: IO[bytes]) -> Iterator[bytes]:
    """The archive's bytes a chunk at a time; it is closed once read."""
    with archive:
        while chunk := archive.read(_CHUNK_BYTES):
            yield chunk
