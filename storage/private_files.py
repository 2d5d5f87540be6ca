"""Files of one owner alone: created 0600 from the moment they exist, never through a link.

What a learner leaves at a predictable path (the runner's log, its exit report) must not be
readable by the programs of other jobs on the node, whatever the umask of whoever wrote it.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import BinaryIO

PRIVATE_MODE = 0o600


def _open_private(path: Path, flags: int) -> int:
    fd = os.open(path, flags | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, PRIVATE_MODE)
    # A file that was there already keeps its mode through O_CREAT: make it private too.
    with contextlib.suppress(OSError):
        os.fchmod(fd, PRIVATE_MODE)
    return fd


def open_private_append(path: Path) -> BinaryIO:
    """`path` opened for appending (created 0600 if missing, made 0600 if not)."""
    return os.fdopen(_open_private(path, os.O_WRONLY | os.O_APPEND), "ab")


def write_private_text(path: Path, text: str) -> None:
    """Replace the contents of `path` with `text`, in place (it may be a file the cluster
    put there, such as a container's termination log) and 0600."""
    with os.fdopen(_open_private(path, os.O_WRONLY | os.O_TRUNC), "w", encoding="utf-8") as out:
        out.write(text)
