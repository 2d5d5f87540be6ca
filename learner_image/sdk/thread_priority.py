"""Background threads that give way to the work they serve."""

from __future__ import annotations

import contextlib
import os
import sys
import threading

BACKGROUND_NICENESS = 10  # above the process's own


def lower_this_thread(by: int = BACKGROUND_NICENESS) -> None:
    """Run the calling thread at a lower CPU priority than the rest of its process: on a
    machine whose cores are all busy, its work then waits for the program's rather than
    slowing it. Linux keeps a niceness per thread; elsewhere `setpriority` of a thread id
    could hit another process, so this is Linux only."""
    if not sys.platform.startswith("linux"):
        return
    with contextlib.suppress(OSError):
        tid = threading.get_native_id()
        os.setpriority(os.PRIO_PROCESS, tid, min(19, os.getpriority(os.PRIO_PROCESS, tid) + by))
