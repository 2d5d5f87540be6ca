"""`save_checkpoint`: training goes on while its checkpoint is written.

    saving = sdk.save_checkpoint(state, step)   # returns once `state` is copied in memory
    saving.status                               # queued | saving | committed | replaced | failed
    saving.wait()                               # the committed directory (None if replaced)

A call copies the state in the caller's thread (`learner_image.sdk.snapshot`: tensors and
arrays copied value for value into reused buffers, other objects deep-copied; a callable's
bytes taken; files read) and hands the copy to the process's one background thread, which
serializes it (`torch.save`) and commits it with the protocol of
`learner_image.sdk.checkpoints` (temp directory, fsyncs, rename, prune). Hence:

- One save is written at a time. A newer copy waits for it; if one is waiting already, the
  newer takes its place and the older is never written (a line on stderr says so): a program
  that saves faster than its disk writes keeps its newest state, not a backlog. The newer
  copy is taken into the buffers of the one it replaces, so a slow disk costs the training
  thread no fresh memory either. The writer thread runs at a lower CPU priority than the
  program, so on busy cores a save waits for training rather than the other way round.
- A background save that fails is printed on stderr at once, left as a record for the runner
  (which reports it as a job event), and raised as `CheckpointSaveError` by the program's
  next `save_checkpoint` call, which then saves nothing (call it again to save). Raised, not
  only printed: a program that trains on while its checkpoints fail finds out at its next
  crash that everything since its last good checkpoint is gone. Raised where it saves, the
  error stops the program as a synchronous save would have, one call later, unless it catches
  `CheckpointSaveError` and carries on on purpose. `PendingCheckpoint.wait()` raises the same
  error (the failure then counts as reported).
- Program exit waits for the saves under way (an `atexit` handler, with a line on stderr), so
  the runner, which uploads committed checkpoints after the command exits, finds the last one.
  The thread is a daemon: a program killed (SIGKILL, a signal it does not handle, `os._exit`)
  leaves at most a `.tmp-*` directory, which is never restored.
- `blocking=True` waits for the commit and returns the committed directory, as a synchronous
  save does; it copies nothing (its caller waits), and a failure raises CheckpointSaveError.
"""

from __future__ import annotations

import atexit
import os
import sys
import threading
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, Literal, overload

from learner_image.sdk.checkpoints import (
    STATE_BYTES_FILE,
    STATE_FILE,
    FileWriter,
    _bytes_writer,
    _check_relpath,
    _commit,
    _path_writer,
    checkpoint_name,
    pause_for_tests,
    write_failed_record,
)
from learner_image.sdk.environment import LearnerEnv, env
from learner_image.sdk.snapshot import BufferKey, BufferPool, take_snapshot
from learner_image.sdk.thread_priority import lower_this_thread

Status = Literal["queued", "saving", "committed", "replaced", "failed"]
MAX_ERROR_CHARS = 2000  # of a failure's text in its record and event


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def _say(text: str) -> None:
    print(f"dlaas: {text}", file=sys.stderr, flush=True)


class CheckpointSaveError(RuntimeError):
    """A checkpoint could not be written: `step` says which (the newest, when several failed
    since the last report; `also_failed` lists the others), `cause` why."""

    def __init__(self, step: int, cause: BaseException, also_failed: Sequence[int] = ()) -> None:
        self.step = step
        self.cause = cause
        self.also_failed = list(also_failed)
        others = ", ".join(str(s) for s in self.also_failed)
        more = f" (so did the checkpoints of steps {others})" if others else ""
        super().__init__(f"checkpoint step {step} could not be saved: {_describe(cause)}{more}")


class PendingCheckpoint:
    """A checkpoint handed to the background writer; `save_checkpoint` returns one."""

    def __init__(self, step: int, checkpoint_dir: Path) -> None:
        self.step = step
        self.checkpoint_dir = checkpoint_dir
        self.path: Path | None = None  # the committed directory, once committed
        self.error: BaseException | None = None  # why it failed
        self.replaced_by: int | None = None  # the step of the save that took its place
        self._status: Status = "queued"
        self._done = threading.Event()

    @property
    def status(self) -> Status:
        return self._status

    def done(self) -> bool:
        """True once it is committed, replaced or failed."""
        return self._done.is_set()

    def wait(self, timeout: float | None = None) -> Path | None:
        """Wait until it is committed, replaced or failed: the committed directory, or None
        when it was replaced (see `status`) or `timeout` seconds passed first. Raises
        CheckpointSaveError when it failed."""
        if not self._done.wait(timeout):
            return None
        if self.error is not None:
            _saver.mark_reported(self)
            raise CheckpointSaveError(self.step, self.error) from self.error
        return self.path

    def __repr__(self) -> str:
        return f"PendingCheckpoint(step={self.step}, status={self._status!r}, path={self.path})"

    def _finish(
        self,
        status: Status,
        *,
        path: Path | None = None,
        error: BaseException | None = None,
        replaced_by: int | None = None,
    ) -> None:
        self.path, self.error, self.replaced_by = path, error, replaced_by
        self._status = status
        self._done.set()


@dataclass(eq=False)
class _Job:
    handle: PendingCheckpoint
    writers: Mapping[str, FileWriter]
    keep: int
    pinned: bool  # a blocking save: its caller waits for it, so nothing replaces it
    buffers: list[tuple[BufferKey, Any]] = field(default_factory=list)


class _Saver:
    """A process's one background writer and the saves waiting for it."""

    def __init__(self) -> None:
        self._reset()

    def _reset(self) -> None:
        self._cond = threading.Condition()
        self._queue: list[_Job] = []
        self._current: _Job | None = None
        self._thread: threading.Thread | None = None
        self._unreported: list[PendingCheckpoint] = []
        self.pool = BufferPool()

    def submit(self, job: _Job) -> None:
        with self._cond:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._run, name="dlaas-checkpoints", daemon=True
                )
                self._thread.start()
                _register_at_exit()
            self._replace_waiting(job.handle.checkpoint_dir, job.handle.step)
            self._queue.append(job)
            self._cond.notify_all()

    def replace_waiting(self, checkpoint_dir: Path, step: int) -> None:
        """A save of `step` is coming: the save waiting for the writer (not a blocking one),
        if any, is replaced now, and its buffers go back to the pool for the new copy, which
        then needs no fresh memory even while the writer is still busy with an older save."""
        with self._cond:
            self._replace_waiting(checkpoint_dir, step)

    def _replace_waiting(self, checkpoint_dir: Path, step: int) -> None:
        last = self._queue[-1] if self._queue else None
        if last is None or last.pinned or last.handle.checkpoint_dir != checkpoint_dir:
            return
        self._queue.pop()
        self.pool.give(last.buffers)
        last.buffers = []
        last.handle._finish("replaced", replaced_by=step)
        _say(f"checkpoint step {last.handle.step} replaced by step {step} before it was written")

    def _run(self) -> None:
        lower_this_thread()
        while True:
            with self._cond:
                self._cond.wait_for(lambda: bool(self._queue))
                job = self._current = self._queue.pop(0)
                job.handle._status = "saving"
            handle = job.handle
            path: Path | None = None
            error: BaseException | None = None
            try:
                path = _commit(job.writers, handle.step, handle.checkpoint_dir, job.keep)
            except BaseException as exc:
                traceback.clear_frames(exc.__traceback__)  # they hold the copied state
                error = exc
            job.writers = {}
            self.pool.give(job.buffers)
            job.buffers = []
            if error is None:
                handle._finish("committed", path=path)
            else:
                self._record_failure(job, error)
                handle._finish("failed", error=error)
            with self._cond:
                self._current = None
                self._cond.notify_all()

    def _record_failure(self, job: _Job, error: BaseException) -> None:
        step, reason = job.handle.step, _describe(error)[:MAX_ERROR_CHARS]
        _say(f"checkpoint step {step} failed: {reason}")
        try:
            write_failed_record(job.handle.checkpoint_dir, step, reason)
        except OSError as exc:
            _say(f"could not record the failure of checkpoint step {step}: {_describe(exc)}")
        if not job.pinned:
            with self._cond:
                self._unreported.append(job.handle)

    def take_failures(self) -> list[PendingCheckpoint]:
        with self._cond:
            failed, self._unreported = self._unreported, []
        return failed

    def mark_reported(self, handle: PendingCheckpoint) -> None:
        with self._cond:
            if handle in self._unreported:
                self._unreported.remove(handle)

    def pending(self) -> list[PendingCheckpoint]:
        with self._cond:
            jobs = ([self._current] if self._current is not None else []) + self._queue
            return [job.handle for job in jobs]

    def drain(self, timeout: float | None = None) -> bool:
        with self._cond:
            return self._cond.wait_for(
                lambda: self._current is None and not self._queue, timeout=timeout
            )

    def after_fork_in_child(self) -> None:
        """A forked child (a DataLoader worker, say) has no writer thread, and a lock held
        at the fork stays held in it: start afresh."""
        self._reset()


_saver = _Saver()
os.register_at_fork(after_in_child=_saver.after_fork_in_child)
_at_exit_registered = False


def _register_at_exit() -> None:
    # Registered with the first save rather than at import, so that it runs before the
    # handlers of libraries imported earlier (torch): atexit runs the newest first.
    global _at_exit_registered
    if not _at_exit_registered:
        atexit.register(_wait_at_exit)
        _at_exit_registered = True


def _wait_at_exit() -> None:
    pending = _saver.pending()
    if not pending:
        return
    steps = ", ".join(str(handle.step) for handle in pending)
    which = f"steps {steps}" if len(pending) > 1 else f"step {steps}"
    _say(f"waiting for checkpoint {which} to be written before exiting")
    _saver.drain()


def wait_for_checkpoints(timeout: float | None = None) -> bool:
    """Wait until every checkpoint handed to the background writer is committed, replaced or
    failed; False if `timeout` seconds passed first. Failures are reported as usual (at the
    next save)."""
    return _saver.drain(timeout)


def _raise_failures() -> None:
    failed = _saver.take_failures()
    if failed:
        newest = failed[-1]
        assert newest.error is not None
        also = [handle.step for handle in failed[:-1]]
        raise CheckpointSaveError(newest.step, newest.error, also) from newest.error


def _hand_over(
    writers: Mapping[str, FileWriter],
    step: int,
    e: LearnerEnv,
    blocking: bool,
    buffers: list[tuple[BufferKey, Any]] | None = None,
) -> PendingCheckpoint | Path | None:
    pause_for_tests("snapshot")
    handle = PendingCheckpoint(step, e.checkpoint_dir)
    _saver.submit(_Job(handle, writers, e.checkpoint_keep, blocking, buffers or []))
    return handle.wait() if blocking else handle


@overload
def save_checkpoint_files(
    files: Mapping[str, bytes | Path],
    step: int,
    *,
    all_ranks: bool = ...,
    blocking: Literal[False] = ...,
) -> PendingCheckpoint | None: ...


@overload
def save_checkpoint_files(
    files: Mapping[str, bytes | Path], step: int, *, all_ranks: bool = ..., blocking: Literal[True]
) -> Path | None: ...


def save_checkpoint_files(
    files: Mapping[str, bytes | Path],
    step: int,
    *,
    all_ranks: bool = False,
    blocking: bool = False,
) -> PendingCheckpoint | Path | None:
    """Save a checkpoint made of `files` (relative name -> bytes, or a file to copy) in the
    background; returns its PendingCheckpoint once the files are taken: bytes as they are, a
    file read into memory (so changing it afterwards does not change the checkpoint).

    With `blocking=True`: waits for the commit (files are then copied straight from disk, not
    read into memory first) and returns the committed directory. Returns None on ranks other
    than 0 (unless `all_ranks`, or each learner keeps checkpoints of its own).
    """
    e = env()
    if not e.writes_checkpoints and not all_ranks:
        return None
    checkpoint_name(step)  # refuse a bad step or file name here, not in the background
    for rel in files:
        _check_relpath(rel)
    _raise_failures()
    writers: dict[str, FileWriter] = {}
    for rel, src in files.items():
        if isinstance(src, bytes | bytearray | memoryview):
            writers[rel] = _bytes_writer(src if blocking else bytes(src))
        elif blocking:
            writers[rel] = _path_writer(Path(src))
        else:
            writers[rel] = _bytes_writer(Path(src).read_bytes())
    return _hand_over(writers, step, e, blocking)


@overload
def save_checkpoint(
    state: Mapping[str, Any] | Callable[[], bytes],
    step: int,
    *,
    all_ranks: bool = ...,
    blocking: Literal[False] = ...,
) -> PendingCheckpoint | None: ...


@overload
def save_checkpoint(
    state: Mapping[str, Any] | Callable[[], bytes],
    step: int,
    *,
    all_ranks: bool = ...,
    blocking: Literal[True],
) -> Path | None: ...


def save_checkpoint(
    state: Mapping[str, Any] | Callable[[], bytes],
    step: int,
    *,
    all_ranks: bool = False,
    blocking: bool = False,
) -> PendingCheckpoint | Path | None:
    """Save `state` as the checkpoint for `step` in the background; returns its
    PendingCheckpoint as soon as `state` is copied in memory (train on: later changes to the
    state do not reach the checkpoint).

    A mapping (model and optimizer state dicts, RNG states, counters...) is copied (tensors
    and numpy arrays value for value, device tensors to the CPU, other objects deep-copied),
    then written with `torch.save` as `state.pt`. A callable is called now, in this thread,
    and the bytes it returns are written as they are to `state.bin` (read them back with
    `Checkpoint.read("state.bin")`).

    Raises CheckpointSaveError, saving nothing, when an earlier background save failed since
    the last report (see the module's doc). With `blocking=True`: waits for the commit and
    returns the committed directory (no copy is taken). Returns None on ranks other than 0
    (unless `all_ranks`, or each learner keeps checkpoints of its own).
    """
    e = env()
    if not e.writes_checkpoints and not all_ranks:
        return None
    checkpoint_name(step)
    _raise_failures()
    if callable(state):
        data = state()
        if not isinstance(data, bytes):
            data = bytes(memoryview(data))  # a bytearray's copy; anything else is refused
        return _hand_over({STATE_BYTES_FILE: _bytes_writer(data)}, step, e, blocking)
    import torch

    if blocking:
        payload: Any = dict(state)
        buffers: list[tuple[BufferKey, Any]] = []
    else:
        _saver.replace_waiting(e.checkpoint_dir, step)
        snap = take_snapshot(dict(state), _saver.pool)
        payload, buffers = snap.state, snap.buffers

    def write(f: BinaryIO) -> None:
        torch.save(payload, f)

    return _hand_over({STATE_FILE: write}, step, e, blocking, buffers)
