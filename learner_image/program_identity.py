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
import signal
import time
from collections.abc import Iterable
from pathlib import Path


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
