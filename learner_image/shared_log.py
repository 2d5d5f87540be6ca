"""A learner's log as its shipper sees it in a Kubernetes learner pod: written by another
container (the program's launcher, at pipe speed), followed from this one.

The file lives in the directory the program shares with its helpers, which the program
may change as it likes: every open goes through no link at any step
(`learner_image.checkpoint_sync.open_inside`), so a log swapped for a link to one of the
helper's own files (its `/proc/self/environ`) is refused rather than shipped. Where the
log ends is polled: the end of its last whole line, found in the last `TAIL_BYTES`.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import BinaryIO

from learner_image.checkpoint_sync import open_inside
from learner_image.learner_log import line_bytes

POLL_S = 0.05
TAIL_BYTES = 64 << 10


class SharedLog:
    """A `learner_image.learner_log.FollowedLog` over a file another process appends to."""

    def __init__(self, root: Path, path: Path, origin: tuple[int, int]) -> None:
        self.root = root
        self.path = path
        self.rel = path.relative_to(root).as_posix()
        self.origin = origin
        self.closed = False
        self._end = origin[0]
        self._lock = threading.Lock()
        self._closing = threading.Event()

    def open_reader(self) -> BinaryIO:
        return open_inside(self.root, self.rel)

    def end(self) -> int:
        """Where the file's last whole line ends now (it never moves back)."""
        with self._lock:
            try:
                reader = self.open_reader()
            except OSError:
                return self._end
            with reader:
                size = os.fstat(reader.fileno()).st_size
                if size > self._end:
                    start = max(self._end, size - TAIL_BYTES)
                    reader.seek(start)
                    cut = reader.read(size - start).rfind(b"\n")
                    if cut >= 0:
                        self._end = start + cut + 1
            return self._end

    def wait_beyond(self, offset: int, timeout: float) -> tuple[int, bool]:
        deadline = time.monotonic() + timeout
        while True:
            closed = self.closed
            end = self.end()
            left = deadline - time.monotonic()
            if end > offset or closed or left <= 0:
                return end, closed
            self._closing.wait(min(POLL_S, left))

    def write_line(self, text: str) -> None:
        """A line of the shipper's own, appended whole (the program's lines stay whole too:
        each of its writes appends whole lines)."""
        with open_inside(self.root, self.rel, append=True) as f:
            f.write(line_bytes(text))

    def close(self) -> None:
        """The writer is gone: a last line it left unfinished is completed, and the log ends."""
        try:
            with self.open_reader() as reader:
                size = os.fstat(reader.fileno()).st_size
                reader.seek(max(0, size - 1))
                unfinished = size > 0 and reader.read(1) != b"\n"
            if unfinished:
                with open_inside(self.root, self.rel, append=True) as f:
                    f.write(b"\n")
        except OSError:
            pass
        self.end()
        self.closed = True
        self._closing.set()
