"""The object store contract shared by every backend: keys, errors and the protocol."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Protocol

ProgressCallback = Callable[[int], None]
"""Called with the number of bytes just moved (an increment, not a running total)."""

CHUNK_SIZE = 1 << 20

# Where the local backend keeps files being written; no key may start with it.
RESERVED_PREFIX = ".dlaas-tmp"


class ObjectNotFound(KeyError):
    """The key names no object."""

    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key

    def __str__(self) -> str:
        return f"no object at key {self.key!r}"


class BadContinuation(ValueError):
    """A continuation this store did not hand out (or no longer accepts)."""


@dataclass(frozen=True)
class ObjectInfo:
    key: str
    size: int


@dataclass(frozen=True)
class ObjectPage:
    """One page of a listing; `continuation` (None on the last page) asks for the next."""

    objects: list[ObjectInfo]
    continuation: str | None


class ObjectStore(Protocol):
    def put_file(self, key: str, path: Path, progress: ProgressCallback | None = None) -> None: ...

    def put_stream(
        self, key: str, stream: BinaryIO, progress: ProgressCallback | None = None
    ) -> int: ...

    def put_bytes(self, key: str, data: bytes) -> None: ...

    def get_file(self, key: str, path: Path, progress: ProgressCallback | None = None) -> None: ...

    def get_bytes(self, key: str) -> bytes: ...

    def iter_chunks(
        self, key: str, chunk_size: int = CHUNK_SIZE, start: int = 0
    ) -> Iterator[bytes]: ...

    def size(self, key: str) -> int: ...

    def exists(self, key: str) -> bool: ...

    def list(self, prefix: str) -> Iterator[ObjectInfo]: ...

    def list_page(self, prefix: str, limit: int, continuation: str | None = None) -> ObjectPage:
        """At most `limit` objects under `prefix`, from where `continuation` left off.

        Following the continuations lists every object present for the whole listing
        exactly once. A continuation is opaque and meaningful only with the same prefix;
        one the store cannot read raises `BadContinuation`.
        """
        ...

    def delete_prefix(self, prefix: str) -> int: ...


def validate_key(key: str) -> str:
    """Return `key` if it is a valid object key, else raise ValueError saying why."""
    if not key:
        raise ValueError(
            "object key is empty; give a '/'-separated path such as 'jobs/x/model.zip'"
        )
    _check_path_text(key, "object key")
    if key.endswith("/"):
        raise ValueError(f"object key {key!r} ends with '/'; a key names an object, not a folder")
    if "" in key.split("/"):
        raise ValueError(f"object key {key!r} has an empty component ('//'); remove it")
    return key


def validate_prefix(prefix: str) -> str:
    """Return `prefix` if it may select keys (empty selects all), else raise ValueError."""
    if prefix:
        _check_path_text(prefix, "object key prefix")
    return prefix


def check_page_size(limit: int) -> None:
    if limit <= 0:
        raise ValueError(f"limit must be positive, got {limit}")


def check_range(chunk_size: int, start: int) -> None:
    if chunk_size <= 0:
        raise ValueError(f"chunk_size must be positive, got {chunk_size}")
    if start < 0:
        raise ValueError(f"start must be 0 or more, got {start}")


def _check_path_text(text: str, what: str) -> None:
    if text.startswith("/"):
        raise ValueError(
            f"{what} {text!r} starts with '/'; keys are relative, drop the leading '/'"
        )
    if "\\" in text:
        raise ValueError(f"{what} {text!r} contains a backslash; separate components with '/'")
    if "\x00" in text:
        raise ValueError(f"{what} {text!r} contains a NUL character")
    parts = text.split("/")
    if ".." in parts or "." in parts:
        raise ValueError(f"{what} {text!r} has a '.' or '..' component; give a plain path")
    if parts[0].startswith(RESERVED_PREFIX):
        raise ValueError(f"{what} {text!r} starts with the reserved name {RESERVED_PREFIX!r}")
