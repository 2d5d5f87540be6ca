"""Checkpoints in `CHECKPOINT_DIR`, written so that a half-written one is never restored.

Layout (the runner uploads and restores the same layout):

    CHECKPOINT_DIR/
      ckpt-000000000120/          one directory per checkpoint, named by step
        state.pt                  any files (state.pt is what `save_checkpoint` writes)
        COMMITTED                 last: {"step": 120, "files": {"state.pt": 5123}, "time": t}
      .tmp-ckpt-140-4242/         being written by process 4242; never restored
      .failed-ckpt-150.json       the save of step 150 failed: {"step", "error", "time"}

A save writes every file into `.tmp-ckpt-{step}-{pid}/` and fsyncs it, writes and fsyncs
`COMMITTED`, fsyncs the directory, renames it to `ckpt-{step:012d}/` (atomic) and fsyncs
`CHECKPOINT_DIR`. It then keeps the newest `DLAAS_CHECKPOINT_KEEP` (default 2) committed
checkpoints and removes older ones. `save_checkpoint` (`learner_image.sdk.background_save`)
runs all of that in a background thread, on a copy of the state taken when it is called.

A directory is restorable only if its `COMMITTED` parses, names the directory's step, and lists
exactly the regular files present (other than `COMMITTED`) with their sizes. Anything else
(a `.tmp*` directory, no `COMMITTED`, a truncated or extra file) is skipped and the next older
checkpoint is tried.

A committed checkpoint is immutable: saving a step that already has a committed checkpoint
keeps the existing one and returns its path (POSIX cannot atomically replace a non-empty
directory, and the runner may already have uploaded it). A `ckpt-*` directory for that step
which is not committed is replaced.

A background save that fails leaves a `.failed-ckpt-{step}.json` record (written to a temp
name and renamed): the runner's checkpoint uploader reports it as a job event and removes it.

Only rank 0 writes unless `all_ranks=True` (each learner then needs its own CHECKPOINT_DIR,
as it has on Kubernetes; learners sharing one directory would keep only the first writer's),
or the job restarts each learner on its own (`restart_policy.scope: learner`): then every
learner writes, and restores, checkpoints of its own.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, BinaryIO, cast

from learner_image.sdk.environment import env

COMMITTED = "COMMITTED"
STATE_FILE = "state.pt"
STATE_BYTES_FILE = "state.bin"
CHECKPOINT_PREFIX = "ckpt-"
TMP_PREFIX = ".tmp"

FAILED_PREFIX = ".failed-ckpt-"

_NAME_RE = re.compile(r"^ckpt-(\d{12})$")
_TMP_PID_RE = re.compile(r"^\.tmp-.*-(\d+)$")
_FAILED_RE = re.compile(r"^\.failed-ckpt-(\d+)\.json$")
# Test-only: the stage of a save at which to stop for good (see `pause_for_tests`).
TEST_PAUSE_ENV = "DLAAS_TEST_CHECKPOINT_PAUSE"
TEST_MARKER_ENV = "DLAAS_TEST_CHECKPOINT_MARKER"

FileWriter = Callable[[BinaryIO], None]


@dataclass(frozen=True)
class CommitRecord:
    step: int
    files: dict[str, int]
    time: float


@dataclass(frozen=True)
class Checkpoint:
    step: int
    path: Path
    state: dict[str, Any] | None

    def read(self, name: str) -> bytes:
        """The bytes of one file of this checkpoint (a relative name such as "state.bin")."""
        return self.path.joinpath(*_check_relpath(name).parts).read_bytes()


def checkpoint_name(step: int) -> str:
    if step < 0:
        raise ValueError(f"step must be >= 0, got {step}")
    return f"{CHECKPOINT_PREFIX}{step:012d}"


def parse_checkpoint_name(name: str) -> int | None:
    """The step of a `ckpt-{step:012d}` name, or None for any other name."""
    m = _NAME_RE.match(name)
    return int(m.group(1)) if m else None


def read_commit(path: Path) -> CommitRecord | None:
    """Parse `path/COMMITTED`; None when it is missing or malformed."""
    try:
        raw = json.loads((path / COMMITTED).read_bytes())
    except (OSError, ValueError):
        return None
    if not isinstance(raw, dict):
        return None
    step, files, t = raw.get("step"), raw.get("files"), raw.get("time", 0.0)
    if type(step) is not int or step < 0 or not isinstance(files, dict):
        return None
    if not isinstance(t, int | float) or isinstance(t, bool):
        return None
    checked: dict[str, int] = {}
    for rel, size in files.items():
        if not isinstance(rel, str) or type(size) is not int or size < 0:
            return None
        checked[rel] = size
    return CommitRecord(step=step, files=checked, time=float(t))


def _files_on_disk(path: Path) -> dict[str, int] | None:
    """Regular files under `path` (relative, `/`-separated) with sizes; None on anything odd."""
    found: dict[str, int] = {}
    for root, dirs, files in os.walk(path, followlinks=False):
        for d in dirs:
            if os.path.islink(os.path.join(root, d)):
                return None
        for f in files:
            full = os.path.join(root, f)
            st = os.lstat(full)
            if not stat.S_ISREG(st.st_mode):
                return None
            found[Path(os.path.relpath(full, path)).as_posix()] = st.st_size
    found.pop(COMMITTED, None)
    return found


def verify_checkpoint(path: Path) -> CommitRecord | None:
    """The commit record of a restorable checkpoint directory, or None if it is not one."""
    step = parse_checkpoint_name(path.name)
    if step is None or not path.is_dir() or path.is_symlink():
        return None
    record = read_commit(path)
    if record is None or record.step != step:
        return None
    try:
        on_disk = _files_on_disk(path)
    except OSError:
        return None
    if on_disk != record.files:
        return None
    return record


def _checkpoint_dirs(checkpoint_dir: Path) -> list[tuple[int, Path]]:
    """All `ckpt-*` directories (committed or not), newest step first."""
    try:
        entries = list(os.scandir(checkpoint_dir))
    except FileNotFoundError:
        return []
    found = []
    for entry in entries:
        step = parse_checkpoint_name(entry.name)
        if step is not None and entry.is_dir(follow_symlinks=False):
            found.append((step, Path(entry.path)))
    found.sort(reverse=True)
    return found


def committed_checkpoints(checkpoint_dir: Path | None = None) -> list[tuple[int, Path]]:
    """Restorable checkpoints in `checkpoint_dir` (default CHECKPOINT_DIR), newest first."""
    root = env().checkpoint_dir if checkpoint_dir is None else checkpoint_dir
    return [(s, p) for s, p in _checkpoint_dirs(root) if verify_checkpoint(p) is not None]


def _fsync_path(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _check_relpath(rel: str) -> PurePosixPath:
    p = PurePosixPath(rel)
    if (
        not rel
        or p.is_absolute()
        or "\\" in rel
        or any(part in ("", ".", "..") for part in rel.split("/"))
        or rel == COMMITTED
    ):
        raise ValueError(
            f"invalid checkpoint file name {rel!r}: use a relative path like 'a/b.bin'"
        )
    return p


def _write_file(root: Path, rel: PurePosixPath, writer: FileWriter) -> int:
    target = root.joinpath(*rel.parts)
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target, "wb") as f:
        paused = os.environ.get(TEST_PAUSE_ENV) == "serialize"
        writer(cast(BinaryIO, _PauseMidFile(f)) if paused else f)
        f.flush()
        os.fsync(f.fileno())
        return os.fstat(f.fileno()).st_size


def _remove_dir(path: Path, tag: str) -> None:
    """Remove a directory so that it disappears in one step, then delete its contents."""
    doomed = path.with_name(f"{TMP_PREFIX}-{tag}-{path.name}-{os.getpid()}")
    try:
        os.rename(path, doomed)
    except FileNotFoundError:
        return
    shutil.rmtree(doomed, ignore_errors=True)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _prune(checkpoint_dir: Path, keep: int) -> None:
    committed = [(s, p) for s, p in _checkpoint_dirs(checkpoint_dir) if verify_checkpoint(p)]
    if len(committed) > keep:
        oldest_kept = committed[keep - 1][0]
        for step, path in _checkpoint_dirs(checkpoint_dir):
            if step < oldest_kept:
                _remove_dir(path, "prune")
    for entry in os.scandir(checkpoint_dir):
        m = _TMP_PID_RE.match(entry.name)
        if m and int(m.group(1)) != os.getpid() and not _pid_alive(int(m.group(1))):
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.path, ignore_errors=True)
            else:
                Path(entry.path).unlink(missing_ok=True)


def _commit(writers: Mapping[str, FileWriter], step: int, checkpoint_dir: Path, keep: int) -> Path:
    name = checkpoint_name(step)
    checked = {rel: _check_relpath(rel) for rel in writers}
    checkpoint_dir.mkdir(parents=True, exist_ok=True)
    final = checkpoint_dir / name
    if verify_checkpoint(final) is not None:
        return final
    tmp = checkpoint_dir / f"{TMP_PREFIX}-ckpt-{step}-{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    try:
        sizes = {rel: _write_file(tmp, checked[rel], w) for rel, w in writers.items()}
        for root, _dirs, _files in os.walk(tmp, topdown=False):
            if Path(root) != tmp:
                _fsync_path(Path(root))
        record = {"step": step, "files": sizes, "time": time.time()}
        _write_file(tmp, PurePosixPath(COMMITTED), _bytes_writer(json.dumps(record).encode()))
        _fsync_path(tmp)
        pause_for_tests("commit")
        if final.exists() and verify_checkpoint(final) is None:
            _remove_dir(final, "stale")
        try:
            os.rename(tmp, final)
        except OSError:
            if verify_checkpoint(final) is None:
                raise
            shutil.rmtree(tmp, ignore_errors=True)
            return final
        pause_for_tests("rename")
        _fsync_path(checkpoint_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    pause_for_tests("prune")
    _prune(checkpoint_dir, keep)
    return final


def _bytes_writer(data: bytes) -> FileWriter:
    def write(f: BinaryIO) -> None:
        f.write(data)

    return write


def _path_writer(src: Path) -> FileWriter:
    def write(f: BinaryIO) -> None:
        with open(src, "rb") as s:
            shutil.copyfileobj(s, f, 1 << 20)

    return write


def failed_record_name(step: int) -> str:
    return f"{FAILED_PREFIX}{step}.json"


def write_failed_record(checkpoint_dir: Path, step: int, error: str) -> Path:
    """Leave `.failed-ckpt-{step}.json` saying why the save of `step` failed (whole or not at
    all: written to a temp name, then renamed)."""
    checkpoint_dir.mkdir(parents=True, exist_ok=True)
    final = checkpoint_dir / failed_record_name(step)
    tmp = checkpoint_dir / f"{TMP_PREFIX}-failed-{step}-{os.getpid()}"
    record = {"step": step, "error": error, "time": time.time()}
    tmp.write_text(json.dumps(record))
    os.rename(tmp, final)
    return final


@dataclass(frozen=True)
class FailedSave:
    step: int
    error: str
    path: Path  # the record; remove it once reported


def failed_saves(checkpoint_dir: Path) -> list[FailedSave]:
    """The failure records in `checkpoint_dir`, oldest step first. A record that cannot be
    read still names its step (from its file name)."""
    try:
        entries = list(os.scandir(checkpoint_dir))
    except FileNotFoundError:
        return []
    found = []
    for entry in entries:
        m = _FAILED_RE.match(entry.name)
        if m is None:
            continue
        path = Path(entry.path)
        try:
            raw = json.loads(path.read_bytes())
            error = str(raw["error"]) if isinstance(raw, dict) else ""
        except (OSError, ValueError, KeyError):
            error = ""
        found.append(FailedSave(int(m.group(1)), error or "(no reason recorded)", path))
    found.sort(key=lambda failed: failed.step)
    return found


def pause_for_tests(stage: str) -> None:
    """Test-only: when DLAAS_TEST_CHECKPOINT_PAUSE names `stage`, write the file
    DLAAS_TEST_CHECKPOINT_MARKER names and stop here for good, so that a test can SIGKILL
    the process at a known point of a save. Stages: snapshot (the copy is taken, not yet
    handed over), serialize (1 MiB of a file written), commit (COMMITTED written, not yet
    renamed), rename (renamed, CHECKPOINT_DIR not yet fsynced), prune (before pruning)."""
    if os.environ.get(TEST_PAUSE_ENV) != stage:
        return
    # Written aside, then renamed: the marker appears only with the stage in it.
    marker = Path(os.environ[TEST_MARKER_ENV])
    aside = marker.with_name(f".{marker.name}.tmp")
    aside.write_text(stage)
    os.replace(aside, marker)
    threading.Event().wait()


class _PauseMidFile:
    """Test-only (stage `serialize`): a file that stops for good once 1 MiB went to disk."""

    def __init__(self, f: BinaryIO) -> None:
        self._f = f
        self._written = 0

    def write(self, data: Any) -> int:
        n = self._f.write(data)
        self._written += n
        if self._written >= 1 << 20:
            self._f.flush()
            pause_for_tests("serialize")
        return n

    def __getattr__(self, name: str) -> Any:
        return getattr(self._f, name)


def _candidates(step: int | None) -> Iterator[tuple[int, Path]]:
    for s, p in _checkpoint_dirs(env().checkpoint_dir):
        if step is None or s == step:
            yield s, p


def load_checkpoint(
    map_location: Any = "cpu", *, step: int | None = None, weights_only: bool = False
) -> Checkpoint | None:
    """The newest restorable checkpoint in CHECKPOINT_DIR (or exactly `step`), else None.

    `state` holds what `save_checkpoint` saved with `torch.save` (loaded with `map_location`),
    or None when the checkpoint has no `state.pt` (read its files from `path`, or with
    `Checkpoint.read`). A checkpoint whose
    `state.pt` cannot be loaded is skipped in favour of the next older one. `weights_only`
    is passed to `torch.load`; the default allows the numpy and Python RNG states a job
    saves about itself.
    """
    for s, path in _candidates(step):
        record = verify_checkpoint(path)
        if record is None:
            continue
        if STATE_FILE not in record.files:
            return Checkpoint(step=s, path=path, state=None)
        try:
            state = _load_state(path / STATE_FILE, map_location, weights_only)
        except Exception as exc:
            print(f"dlaas: skipping checkpoint {path.name}: {exc}", file=sys.stderr, flush=True)
            continue
        return Checkpoint(step=s, path=path, state=state)
    return None


def _load_state(path: Path, map_location: Any, weights_only: bool) -> dict[str, Any]:
    import torch

    loaded = torch.load(path, map_location=map_location, weights_only=weights_only)
    if not isinstance(loaded, dict):
        return {"state": loaded}
    return loaded
