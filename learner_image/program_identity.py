"""The program's own uid, when the runner is root: handing it its directories, and ending
everything it runs.

The node agent gives each learner a uid of its own (DLAAS_PROGRAM_UID). The runner fetches
the code, the data and the checkpoint to restore as root, then hands those directories over
to that uid and starts the program as it: the program owns its directories and nothing else,
cannot read the runner's environment (`/proc/<pid>/environ` is its owner's), the platform's
home or another learner's files.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import stat
import time
from collections.abc import Iterable
from pathlib import Path

# The directories every uid may write in, where a program may leave files outside its own.
SHARED_DIRS = (Path("/tmp"), Path("/var/tmp"), Path("/dev/shm"))


def hand_over(directories: Iterable[Path], uid: int) -> None:
    """Give `uid` (and its own group) every file and directory under `directories`, links
    themselves rather than what they point at; each directory stays private to it (0700)."""
    for top in directories:
        top.mkdir(parents=True, exist_ok=True)
        os.chown(top, uid, uid, follow_symlinks=False)
        top.chmod(0o700)
        for root, dirs, files in os.walk(top, followlinks=False):
            for name in [*dirs, *files]:
                os.chown(os.path.join(root, name), uid, uid, follow_symlinks=False)


def _owner(pid: str) -> int | None:
    try:
        return os.stat(f"/proc/{pid}").st_uid
    except OSError:
        return None


def processes_of(uid: int) -> list[int]:
    return [int(e.name) for e in os.scandir("/proc") if e.name.isdigit() and _owner(e.name) == uid]


def end_processes(uid: int, timeout: float = 2.0) -> None:
    """SIGKILL every process running as `uid` and wait, briefly, until none is left."""
    deadline = time.monotonic() + timeout
    while (left := processes_of(uid)) and time.monotonic() < deadline:
        for pid in left:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.01)


def _reachable_by(info: os.stat_result, uid: int) -> bool:
    """Whether `uid` (whose group is its own) may enter a directory with this status."""
    if info.st_uid == uid:
        return True
    if info.st_gid == uid:
        return bool(info.st_mode & stat.S_IXGRP)
    return bool(info.st_mode & stat.S_IXOTH)


def remove_files_of(
    uid: int, roots: Iterable[Path] = SHARED_DIRS, skip: Iterable[Path] = ()
) -> list[str]:
    """Remove every file and directory `uid` owns under `roots`, links never followed, but
    nothing under `skip` (learners' working directories, which go their own way); the paths
    removed. Only directories the uid could enter are searched: nothing it could reach lies
    elsewhere. A directory it owns goes with all it holds (everything in it was the uid's
    to change)."""
    skipped = {str(path) for path in skip}
    removed = []
    for root in roots:
        try:
            top = os.lstat(root)
        except OSError:
            continue
        if not stat.S_ISDIR(top.st_mode):
            continue
        pending = [str(root)]
        while pending:
            directory = pending.pop()
            try:
                entries = list(os.scandir(directory))
            except OSError:
                continue
            for entry in entries:
                try:
                    info = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                is_dir = stat.S_ISDIR(info.st_mode)
                if entry.path in skipped:
                    continue
                if info.st_uid == uid:
                    with contextlib.suppress(OSError):
                        if is_dir:
                            shutil.rmtree(entry.path)
                        else:
                            os.unlink(entry.path)
                        removed.append(entry.path)
                elif is_dir and _reachable_by(info, uid) and entry.path not in skipped:
                    pending.append(entry.path)
    return removed
