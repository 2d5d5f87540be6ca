"""Checkpoints between CHECKPOINT_DIR and the object store.

Local protocol (the SDK writes it, `learner_image.sdk.checkpoints`): a checkpoint is a
directory `ckpt-{step:012d}/` whose `COMMITTED` record, written last, lists its files and
sizes; the SDK builds it as `.tmp-ckpt-...` and renames it into place. The runner calls a
local checkpoint committed exactly when the SDK would restore it (`verify_checkpoint`).
Remote layout: `jobs/{job}/checkpoints/{name}/<files>` with `COMMITTED` uploaded last, so a
checkpoint is restorable exactly when its remote `COMMITTED` exists. That is the gang's one
series (learner 1 uploads it, every learner restores it). A learner restarted on its own
(`restart_policy.scope: learner`) keeps a series of its own instead, one level down:
`jobs/{job}/checkpoints/learner-{n}/{name}/<files>`; every function below takes that `learner`
(None: the gang's series), and events name such a checkpoint `learner-{n}/{name}`.

- `restore_newest` (runner start): newest remote committed checkpoint -> a `.tmp-restore-*`
  directory, files first and `COMMITTED` last, then renamed to `ckpt-.../`; one that does not
  verify once downloaded is removed and the next older one tried.
- `CheckpointUploader.sync_once` (a background poll while the command runs, and once at the
  end): uploads the newest local committed checkpoint not yet uploaded (exactly the files its
  `COMMITTED` lists), then deletes remote checkpoints older than the newest `keep` committed
  ones. A checkpoint the SDK deletes or replaces while it is being uploaded is abandoned (its
  partial upload removed); its `COMMITTED` never goes up. It also reports the saves the SDK
  could not write (`.failed-ckpt-{step}.json` records, each once, then removed) to
  `on_failed(step, error)`.
"""

from __future__ import annotations

import os
import shutil
import stat
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

from learner_image.sdk.checkpoints import (
    COMMITTED,
    CommitRecord,
    failed_saves,
    parse_checkpoint_name,
    verify_checkpoint,
)

if TYPE_CHECKING:
    from storage.object_store import ObjectStore


def checkpoints_prefix(job_id: str, learner: int | None = None) -> str:
    """Where a series of checkpoints is stored: the gang's, or one learner's own."""
    base = f"jobs/{job_id}/checkpoints/"
    return base if learner is None else f"{base}{learner_folder(learner)}/"


def learner_folder(learner: int) -> str:
    return f"learner-{learner}"


def stored_name(name: str, learner: int | None = None) -> str:
    """A checkpoint's path under the job's `checkpoints/`, as the job's events name it."""
    return name if learner is None else f"{learner_folder(learner)}/{name}"


def is_checkpoint_name(name: str) -> bool:
    return parse_checkpoint_name(name) is not None


def newest_local(checkpoint_dir: Path) -> tuple[str, CommitRecord] | None:
    """The newest checkpoint in `checkpoint_dir` the SDK would restore, with its record."""
    try:
        entries = list(os.scandir(checkpoint_dir))
    except FileNotFoundError:
        return None
    names = sorted(
        (e.name for e in entries if is_checkpoint_name(e.name) and e.is_dir()), reverse=True
    )
    for name in names:
        record = verify_checkpoint(checkpoint_dir / name)
        if record is not None:
            return name, record
    return None


@dataclass(frozen=True)
class RemoteCheckpoints:
    committed: list[str]  # oldest first
    partial: list[str]  # names with files but no COMMITTED


def remote_checkpoints(
    store: ObjectStore, job_id: str, learner: int | None = None
) -> RemoteCheckpoints:
    prefix = checkpoints_prefix(job_id, learner)
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


_DIRECTORY = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW


def open_inside(root: Path, rel: str, *, append: bool = False) -> BinaryIO:
    """Open the regular file `rel` under `root` for reading (or appending), through no link
    at any step. The program owns its checkpoint directory (in a Kubernetes learner pod, the
    whole shared directory) and may swap a file for a link to one of the runner's between a
    check and the read: opened this way, the swap fails the read."""
    parts = rel.split("/")
    if any(part in ("", ".", "..") for part in parts):
        raise FileNotFoundError(rel)
    fd = os.open(root, _DIRECTORY)
    try:
        for part in parts[:-1]:
            inner = os.open(part, _DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = inner
        flags = os.O_WRONLY | os.O_APPEND if append else os.O_RDONLY
        leaf = os.open(parts[-1], flags | os.O_NOFOLLOW, dir_fd=fd)
    finally:
        os.close(fd)
    if not stat.S_ISREG(os.fstat(leaf).st_mode):
        os.close(leaf)
        raise FileNotFoundError(f"{rel} is not a regular file")
    return os.fdopen(leaf, "ab" if append else "rb", buffering=0 if append else -1)


class CheckpointVanished(Exception):
    """The local checkpoint was deleted or changed while it was being uploaded."""


def upload_checkpoint(
    store: ObjectStore,
    job_id: str,
    directory: Path,
    record: CommitRecord,
    learner: int | None = None,
) -> None:
    """Upload one local committed checkpoint: the files its record lists, then `COMMITTED`.

    Raises CheckpointVanished (after removing the partial upload) when the directory goes
    away or stops matching its record meanwhile (the SDK pruned or replaced it).
    """
    prefix = f"{checkpoints_prefix(job_id, learner)}{directory.name}/"
    try:
        for rel in sorted(record.files):
            with open_inside(directory, rel) as stream:
                store.put_stream(prefix + rel, stream)
        if verify_checkpoint(directory) != record:
            raise CheckpointVanished(f"{directory.name} changed while it was uploaded")
        with open_inside(directory, COMMITTED) as stream:
            store.put_stream(prefix + COMMITTED, stream)
    except (OSError, CheckpointVanished) as exc:
        store.delete_prefix(prefix)
        if isinstance(exc, CheckpointVanished):
            raise
        raise CheckpointVanished(f"{directory.name}: {exc}") from exc


def prune_remote(
    store: ObjectStore, job_id: str, keep: int, learner: int | None = None
) -> list[str]:
    """Delete remote checkpoints older than the newest `keep` committed ones; also partial
    uploads older than the newest committed one. Returns the deleted names."""
    remote = remote_checkpoints(store, job_id, learner)
    if not remote.committed:
        return []
    newest = remote.committed[-1]
    doomed = remote.committed[: -max(keep, 1)]
    doomed += [name for name in remote.partial if name < newest]
    for name in doomed:
        store.delete_prefix(f"{checkpoints_prefix(job_id, learner)}{name}/")
    return sorted(doomed)


def restore_newest(
    store: ObjectStore, job_id: str, checkpoint_dir: Path, learner: int | None = None
) -> str | None:
    """Download the newest remote committed checkpoint that verifies into `checkpoint_dir`;
    its name, or None when there is none. Files land in a temp directory renamed into place
    at the end."""
    checkpoint_dir.mkdir(parents=True, exist_ok=True)
    for name in reversed(remote_checkpoints(store, job_id, learner).committed):
        final = checkpoint_dir / name
        if verify_checkpoint(final) is not None:
            return name
        tmp = checkpoint_dir / f".tmp-restore-{name}-{os.getpid()}"
        _remove_tree(tmp)
        tmp.mkdir()
        prefix = f"{checkpoints_prefix(job_id, learner)}{name}/"
        for info in store.list(prefix):
            rel = info.key[len(prefix) :]
            if rel != COMMITTED:
                store.get_file(info.key, _safe_join(tmp, rel))
        store.get_file(prefix + COMMITTED, tmp / COMMITTED)
        _remove_tree(final)
        os.rename(tmp, final)
        if verify_checkpoint(final) is not None:
            return name
        _remove_tree(final)
    return None


def _safe_join(root: Path, rel: str) -> Path:
    parts = rel.split("/")
    if rel.startswith("/") or any(p in ("", ".", "..") for p in parts):
        raise ValueError(f"unsafe checkpoint file name {rel!r}")
    return root.joinpath(*parts)


def _remove_tree(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)


def _ignore_failed_save(step: int, error: str) -> None:
    pass


class CheckpointUploader:
    """Uploads newly committed local checkpoints; safe to call from one thread at a time.

    `on_failed(step, error)` hears of every save the SDK could not write (the checkpoint of
    `step`; `error` is the exception's type and text), once per failure record."""

    def __init__(
        self,
        store: ObjectStore,
        job_id: str,
        checkpoint_dir: Path,
        keep: int,
        on_uploaded: Callable[[str], None],
        on_error: Callable[[str], None],
        already_uploaded: str | None = None,
        learner: int | None = None,
        on_failed: Callable[[int, str], None] = _ignore_failed_save,
    ) -> None:
        self.store = store
        self.job_id = job_id
        self.learner = learner  # the learner whose own series this is; None: the gang's
        self.checkpoint_dir = checkpoint_dir
        self.keep = keep
        self.on_uploaded = on_uploaded
        self.on_error = on_error
        self.on_failed = on_failed
        self.last_uploaded = already_uploaded
        self._reported: str | None = None
        self._lock = threading.Lock()

    def sync_once(self) -> str | None:
        """Report failed saves; upload the newest local committed checkpoint if it is new;
        its name or None."""
        with self._lock:
            self._report_failed_saves()
            found = newest_local(self.checkpoint_dir)
            if found is None:
                return None
            newest, record = found
            if self.last_uploaded is not None and newest <= self.last_uploaded:
                return None
            try:
                upload_checkpoint(
                    self.store, self.job_id, self.checkpoint_dir / newest, record, self.learner
                )
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
                prune_remote(self.store, self.job_id, self.keep, self.learner)
            except Exception as exc:
                self.on_error(f"could not prune old checkpoints: {exc}")
            return newest

    def _report_failed_saves(self) -> None:
        for failed in failed_saves(self.checkpoint_dir):
            try:
                self.on_failed(failed.step, failed.error)
            except Exception as exc:  # reported once all the same: no retry every poll
                self.on_error(
                    f"could not report the failed checkpoint of step {failed.step}: {exc}"
                )
            failed.path.unlink(missing_ok=True)
