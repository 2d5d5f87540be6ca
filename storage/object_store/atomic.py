"""Byte copying shared by the backends: chunked copy with progress, atomic file writes."""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path
from typing import Protocol

from storage.object_store.base import CHUNK_SIZE, ProgressCallback


class Readable(Protocol):
    def read(self, size: int = ..., /) -> bytes: ...


class Writable(Protocol):
    def write(self, data: bytes, /) -> int: ...


def copy_stream(source: Readable, out: Writable, progress: ProgressCallback | None) -> int:
    """Copy `source` to `out` in chunks; return the number of bytes copied."""
    total = 0
    while chunk := source.read(CHUNK_SIZE):
        out.write(chunk)
        total += len(chunk)
        if progress is not None:
            progress(len(chunk))
    return total


def read_full(source: Readable, size: int) -> bytes:
    """Read `size` bytes, fewer only at end of stream (a single read may return less)."""
    chunk = source.read(size)
    if len(chunk) >= size or not chunk:
        return chunk
    pieces = [chunk]
    missing = size - len(chunk)
    while missing and (chunk := source.read(missing)):
        pieces.append(chunk)
        missing -= len(chunk)
    return b"".join(pieces)


def write_atomically(
    path: Path, source: Readable, progress: ProgressCallback | None, *, fsync: bool = False
) -> int:
    """Copy `source` into a temp file beside `path`, then rename it over `path`.

    Readers of `path` see the old content or the whole new content, never a part.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".part")
    try:
        with os.fdopen(fd, "wb") as out:
            total = copy_stream(source, out, progress)
            if fsync:
                out.flush()
                os.fsync(out.fileno())
        os.replace(tmp_name, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp_name)
        raise
    return total
