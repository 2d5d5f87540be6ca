"""Checkpoints between CHECKPOINT_DIR and the object store.

Local protocol (the SDK writes it): a checkpoint is a directory `ckpt-{step:012d}/` that holds
a `COMMITTED` file, written last; the SDK builds it as `.tmp-ckpt-...` and renames it into
place. Remote layout: `jobs/{job}/checkpoints/{name}/<files>` with `COMMITTED` uploaded last,
so a checkpoint is restorable exactly when its remote `COMMITTED` exists.

- `restore_newest` (runner start): newest remote committed checkpoint -> a `.tmp-restore-*`
  directory, files first and `COMMITTED` last, then renamed to `ckpt-.../`.
- `CheckpointUploader.sync_once` (a background poll while the command runs, and once at the
  end): uploads the newest local committed checkpoint not yet uploaded, then deletes remote
  checkpoints older than the newest `keep` committed ones. A checkpoint the SDK deletes while
  it is being uploaded is abandoned (its partial upload removed); its `COMMITTED` never goes up.
"""

from __future__ import annotations

import json
import os
import shutil
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from storage.object_store import ObjectStore

COMMITTED = "COMMITTED"
PREFIX = "ckpt-"


def checkpoints_prefix(job_id: str) -> str:
    return f"jobs/{job_id}/checkpoints/"


def is_checkpoint_name(name: str) -> bool:
    return name.startswith(PREFIX) and "/" not in name and not name.endswith(".tmp")


def local_committed(checkpoint_dir: Path) -> list[str]:
    """Names of the committed checkpoints in `checkpoint_dir`, oldest first."""
    try:
        entries = list(os.scandir(checkpoint_dir))
    except FileNotFoundError:
        return []
    names = [
        e.name
        for e in entries
        if is_checkpoint_name(e.name)
        and e.is_dir(follow_symlinks=False)
        and os.path.isfile(os.path.join(e.path, COMMITTED))
    ]
    return sorted(names)


@dataclass(frozen=True)
class RemoteCheckpoints:
    committed: list[str]  # oldest first
    partial: list[str]  # names with files but no COMMITTED


def remote_checkpoints(store: ObjectStore, job_id: str) -> RemoteCheckpoints:
    prefix = checkpoints_prefix(job_id)
    names: set[str] = set()
    committed: set[str] = set()
    for info in store.list(prefix):
        rest = info.key[len(prefix) :]
        name, _, relpath = rest.partition("/")
        if not is_checkpoint_name(name) or not relpath:
            continue
        names.add(name)
        if relpath == COMMITTED:
            committed.add(name)
    return RemoteCheckpoints(sorted(committed), sorted(names - committed))


def checkpoint_files(directory: Path) -> list[str]:
    """Relative paths (with `/`) of the regular files in a checkpoint, `COMMITTED` excluded."""
    files: list[str] = []
    for root, dirs, names in os.walk(directory):
        dirs.sort()
        for name in sorted(names):
            full = os.path.join(root, name)
            rel = os.path.relpath(full, directory).replace(os.sep, "/")
            if rel == COMMITTED or not os.path.isfile(full):
                continue
            files.append(rel)
    return files


class CheckpointVanished(Exception):
    """The local checkpoint was deleted or changed while it was being uploaded."""


def committed_sizes(directory: Path) -> dict[str, int] | None:
    """The `files` map of a checkpoint's COMMITTED record, if it has one."""
    try:
        record = json.loads((directory / COMMITTED).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise CheckpointVanished(str(directory)) from None
    except ValueError:
        return None
    files = record.get("files") if isinstance(record, dict) else None
    if not isinstance(files, dict):
        return None
    return {str(k): int(v) for k, v in files.items() if isinstance(v, int)}


def upload_checkpoint(store: ObjectStore, job_id: str, directory: Path) -> None:
    """Upload one local committed checkpoint: every file, then `COMMITTED`.

    Raises CheckpointVanished (after removing the partial upload) when the directory goes
    away or does not match its COMMITTED record.
    """
    name = directory.name
    prefix = f"{checkpoints_prefix(job_id)}{name}/"
    try:
        expected = committed_sizes(directory)
        files = checkpoint_files(directory)
        if expected is not None:
            missing = set(expected) - set(files)
            if missing:
                raise CheckpointVanished(f"{name}: files listed in COMMITTED are missing")
        for rel in files:
            path = directory / rel
            store.put_file(prefix + rel, path)
            if expected is not None and rel in expected and path.stat().st_size != expected[rel]:
                raise CheckpointVanished(f"{name}/{rel}: size differs from COMMITTED")
        store.put_file(prefix + COMMITTED, directory / COMMITTED)
    except (FileNotFoundError, CheckpointVanished) as exc:
        store.delete_prefix(prefix)
        if isinstance(exc, CheckpointVanished):
            raise
        raise CheckpointVanished(f"{name}: {exc}") from exc


def prune_remote(store: ObjectStore, job_id: str, keep: int) -> list[str]:
    """Delete remote checkpoints older than the newest `keep` committed ones; also partial
    uploads older than the newest committed one. Returns the deleted names."""
    remote = remote_checkpoints(store, job_id)
    if not remote.committed:
        return []
    newest = remote.committed[-1]
    doomed = remote.committed[: -max(keep, 1)]
    doomed += [name for name in remote.partial if name < newest]
    for name in doomed:
        store.delete_prefix(f"{checkpoints_prefix(job_id)}{name}/")
    return sorted(doomed)


def restore_newest(store: ObjectStore, job_id: str, checkpoint_dir: Path) -> str | None:
    """Download the newest remote committed checkpoint into `checkpoint_dir`; its name, or
    None when there is none. Files land in a temp directory renamed into place at the end."""
    remote = remote_checkpoints(store, job_id)
    if not remote.committed:
        return None
    name = remote.committed[-1]
    final = checkpoint_dir / name
    if (final / COMMITTED).is_file():
        return name
    prefix = f"{checkpoints_prefix(job_id)}{name}/"
    tmp = checkpoint_dir / f".tmp-restore-{name}-{os.getpid()}"
    checkpoint_dir.mkdir(parents=True, exist_ok=True)
    _remove_tree(tmp)
    tmp.mkdir()
    for info in store.list(prefix):
        rel = info.key[len(prefix) :]
        if rel == COMMITTED:
            continue
        target = _safe_join(tmp, rel)
        target.parent.mkdir(parents=True, exist_ok=True)
        store.get_file(info.key, target)
    store.get_file(prefix + COMMITTED, tmp / COMMITTED)
    _remove_tree(final)
    os.rename(tmp, final)
    return name


def _safe_join(root: Path, rel: str) -> Path:
    parts = rel.split("/")
    if rel.startswith("/") or any(p in ("", ".", "..") for p in parts):
        raise ValueError(f"unsafe checkpoint file name {rel!r}")
    return root.joinpath(*parts)


def _remove_tree(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)


class CheckpointUploader:
    """Uploads newly committed local checkpoints; safe to call from one thread at a time."""

    def __init__(
        self,
        store: ObjectStore,
        job_id: str,
        checkpoint_dir: Path,
        keep: int,
        on_uploaded: Callable[[str], None],
        on_error: Callable[[str], None],
        already_uploaded: str | None = None,
    ) -> None:
        self.store = store
        self.job_id = job_id
        self.checkpoint_dir = checkpoint_dir
        self.keep = keep
        self.on_uploaded = on_uploaded
        self.on_error = on_error
        self.last_uploaded = already_uploaded
        self._reported: str | None = None
        self._lock = threading.Lock()

    def sync_once(self) -> str | None:
        """Upload the newest local committed checkpoint if it is new; its name or None."""
        with self._lock:
            names = local_committed(self.checkpoint_dir)
            if not names:
                return None
            newest = names[-1]
            if self.last_uploaded is not None and newest <= self.last_uploaded:
                return None
            try:
                upload_checkpoint(self.store, self.job_id, self.checkpoint_dir / newest)
            except CheckpointVanished:
                return None  # the SDK replaced it; the next poll takes the newer one
            except Exception as exc:
                if self._reported != newest:  # once per checkpoint, not once per poll
                    self._reported = newest
                    self.on_error(f"could not upload checkpoint {newest}: {exc}")
                return None
            self.last_uploaded = newest
            self.on_uploaded(newest)
            try:
                prune_remote(self.store, self.job_id, self.keep)
            except Exception as exc:
                self.on_error(f"could not prune old checkpoints: {exc}")
            return newest

    def run(self, stop: threading.Event, interval: float = 0.5) -> None:
        """Poll until `stop` is set."""
        while not stop.wait(interval):
            self.sync_once()
