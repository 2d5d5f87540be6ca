"""Objects as files under a root directory; every write is atomic (temp file + rename)."""

from __future__ import annotations

import contextlib
import io
import itertools
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from storage.object_store.atomic import copy_stream, write_atomically
from storage.object_store.base import (
    CHUNK_SIZE,
    RESERVED_PREFIX,
    ObjectInfo,
    ObjectNotFound,
    ObjectPage,
    ProgressCallback,
    check_page_size,
    check_range,
    validate_key,
    validate_prefix,
)


class LocalObjectStore:
    """Stores key `a/b` at `root/a/b`. Files being written live in `root/.dlaas-tmp/`."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self._tmp_dir = self.root / RESERVED_PREFIX

    def __repr__(self) -> str:
        return f"LocalObjectStore({str(self.root)!r})"

    def _path(self, key: str) -> Path:
        return self.root.joinpath(*validate_key(key).split("/"))

    def put_file(self, key: str, path: Path, progress: ProgressCallback | None = None) -> None:
        with open(path, "rb") as stream:
            self.put_stream(key, stream, progress)

    def put_stream(
        self, key: str, stream: BinaryIO, progress: ProgressCallback | None = None
    ) -> int:
        target = self._path(key)
        self._tmp_dir.mkdir(parents=True, exist_ok=True)
        fd, tmp_name = tempfile.mkstemp(dir=self._tmp_dir, prefix="put-")
        try:
            with os.fdopen(fd, "wb") as out:
                total = copy_stream(stream, out, progress)
                out.flush()
                os.fsync(out.fileno())
            target.parent.mkdir(parents=True, exist_ok=True)
            os.replace(tmp_name, target)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp_name)
            raise
        _fsync_dir(target.parent)
        return total

    def put_bytes(self, key: str, data: bytes) -> None:
        self.put_stream(key, io.BytesIO(data))

    def get_file(self, key: str, path: Path, progress: ProgressCallback | None = None) -> None:
        with self._open(key) as source:
            write_atomically(Path(path), source, progress)

    def get_bytes(self, key: str) -> bytes:
        with self._open(key) as source:
            return source.read()

    def iter_chunks(
        self, key: str, chunk_size: int = CHUNK_SIZE, start: int = 0
    ) -> Iterator[bytes]:
        check_range(chunk_size, start)
        source = self._open(key)
        source.seek(start)
        return _chunks(source, chunk_size)

    def size(self, key: str) -> int:
        path = self._path(key)
        try:
            st = path.stat()
        except (FileNotFoundError, NotADirectoryError):
            raise ObjectNotFound(key) from None
        if not path.is_file():
            raise ObjectNotFound(key)
        return st.st_size

    def exists(self, key: str) -> bool:
        return self._path(key).is_file()

    def list(self, prefix: str) -> Iterator[ObjectInfo]:
        return self._listed(prefix, after=None)

    def list_page(self, prefix: str, limit: int, continuation: str | None = None) -> ObjectPage:
        """The continuation is the last key listed, less the prefix: where to go on from."""
        check_page_size(limit)
        after = None if continuation is None else prefix + continuation
        found = list(itertools.islice(self._listed(prefix, after), limit + 1))
        objects = found[:limit]
        more = len(found) > limit
        return ObjectPage(objects, objects[-1].key[len(prefix) :] if more else None)

    def _listed(self, prefix: str, after: str | None) -> Iterator[ObjectInfo]:
        """Objects under `prefix` in key order, only those after the key `after`."""
        validate_prefix(prefix)
        folder, _, _ = prefix.rpartition("/")
        start = self.root.joinpath(*folder.split("/")) if folder else self.root
        base = f"{folder}/" if folder else ""
        for info in _walk_sorted(start, base, after):
            if info.key.startswith(prefix):
                yield info

    def delete_prefix(self, prefix: str) -> int:
        count = 0
        folders: set[Path] = set()
        for info in list(self.list(prefix)):
            path = self.root.joinpath(*info.key.split("/"))
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
                count += 1
            folders.add(path.parent)
        for folder in sorted(folders, key=lambda p: len(p.parts), reverse=True):
            _remove_empty_parents(folder, self.root)
        return count

    def _open(self, key: str) -> BinaryIO:
        path = self._path(key)
        try:
            source = open(path, "rb")  # noqa: SIM115 - returned to the caller, who closes it
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            raise ObjectNotFound(key) from None
        return source


def _chunks(source: BinaryIO, chunk_size: int) -> Iterator[bytes]:
    with source:
        while chunk := source.read(chunk_size):
            yield chunk


def _walk_sorted(folder: Path, base: str, after: str | None = None) -> Iterator[ObjectInfo]:
    """Yield the files under `folder` in key order (as S3 lists them), those after the key
    `after` only: a folder whose every key sorts before it is not even read."""
    try:
        entries = list(os.scandir(folder))
    except (FileNotFoundError, NotADirectoryError):
        return
    named: list[tuple[str, os.DirEntry[str]]] = []
    for entry in entries:
        if not base and entry.name.startswith(RESERVED_PREFIX):
            continue
        is_dir = entry.is_dir(follow_symlinks=False)
        named.append((entry.name + "/" if is_dir else entry.name, entry))
    for name, entry in sorted(named, key=lambda item: item[0]):
        key = base + name
        if name.endswith("/"):
            if after is None or key > after or after.startswith(key):
                yield from _walk_sorted(Path(entry.path), key, after)
        elif after is not None and key <= after:
            continue
        elif entry.is_file():
            yield ObjectInfo(key=key, size=entry.stat().st_size)


def _fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _remove_empty_parents(folder: Path, root: Path) -> None:
    while folder != root and root in folder.parents:
        try:
            folder.rmdir()
        except OSError:
            return
        folder = folder.parent
