"""The learner's durable log: the command's output written to LOG_DIR at pipe speed.

`capture_output` reads the command's pipe in large chunks and appends whole lines to a
`LearnerLog`, doing per-line work only for a chunk that needs it (carriage returns, invalid
UTF-8, a line over `MAX_LINE_BYTES`), so the program waits for nothing but a write to the
page cache. Everything else (the live stream, metric parsing, uploads) follows the file
behind it (`learner_image.live_log`), and none of it can slow the program down.

Lines are numbered from 1 and the numbering continues the log of earlier attempts, which the
runner downloads before the command starts: line n of the file is line n of the stored log.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO, Protocol

MAX_LINE_BYTES = 16 * 1024
TRUNCATED_MARK = " [line truncated by dlaas]"
READ_BYTES = 1 << 20
# Linux lets anyone widen a pipe to 1 MiB (`/proc/sys/fs/pipe-max-size`): slack for the
# moments the runner is descheduled, so a burst of output never waits for it.
PIPE_BYTES = 1 << 20
_F_SETPIPE_SZ = 1031
# A flood is read every GATHER_S rather than line by line (`capture_output`).
GATHER_S = 0.005
GATHER_BYTES = 256 << 10


def decode_line(raw: bytes) -> str:
    """Text of one raw line: trailing newline dropped, invalid UTF-8 replaced, and of a
    carriage-return-overwritten line (progress bars) only what a terminal would show last."""
    if raw.endswith(b"\n"):
        raw = raw[:-1]
    text = raw.decode("utf-8", errors="replace").rstrip("\r")
    if "\r" in text:
        text = text.rsplit("\r", 1)[1]
    return text


def _stored_line(raw: bytes, max_bytes: int) -> str:
    if len(raw) > max_bytes:
        return decode_line(raw[:max_bytes]) + TRUNCATED_MARK
    return decode_line(raw)


def _plain(data: bytes, max_bytes: int) -> bool:
    """Whether whole lines `data` are stored as they are (the common case, checked in C)."""
    if b"\r" in data:
        return False
    if len(data) > max_bytes + 1 and max(map(len, data.split(b"\n"))) > max_bytes:
        return False
    if data.isascii():
        return True
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def normalize_output(data: bytes, max_bytes: int = MAX_LINE_BYTES) -> bytes:
    """Whole lines of output (`data` ends with a newline) as the log stores them: UTF-8, of a
    carriage-return-overwritten line what a terminal shows, a line over `max_bytes` cut and
    marked."""
    if _plain(data, max_bytes):
        return data
    lines = data.split(b"\n")[:-1]
    return "".join(_stored_line(raw, max_bytes) + "\n" for raw in lines).encode()


def count_lines(path: Path) -> tuple[int, int]:
    """(bytes, lines) of an existing log file; a last line without newline is completed."""
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        return 0, 0
    lines = 0
    last = b"\n"
    with open(path, "rb") as f:
        while chunk := f.read(READ_BYTES):
            lines += chunk.count(b"\n")
            last = chunk[-1:]
    if size and last != b"\n":
        with open(path, "ab") as f:
            f.write(b"\n")
        return size + 1, lines + 1
    return size, lines


class FollowedLog(Protocol):
    """A log the live stream, the metrics and the uploads follow: written in this process
    (`LearnerLog`) or by another one (`learner_image.shared_log.SharedLog`)."""

    path: Path
    origin: tuple[int, int]  # (bytes, lines) of earlier attempts: this attempt's start

    def end(self) -> int:
        """Bytes written so far, up to the end of a line."""
        ...

    def wait_beyond(self, offset: int, timeout: float) -> tuple[int, bool]: ...

    def write_line(self, text: str) -> None: ...

    def open_reader(self) -> BinaryIO: ...

    def close(self) -> None: ...


def line_bytes(text: str) -> bytes:
    """A line of the runner's own as stored (a text with newlines becomes several lines)."""
    return "".join(part + "\n" for part in text.split("\n")).encode(errors="replace")


class LearnerLog:
    """An append-only log file of whole lines, and where it ends, for readers that follow it."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self.size, self.lines = count_lines(path)
        self.origin = (self.size, self.lines)
        self._file = open(path, "ab", buffering=0)  # noqa: SIM115 - closed by close()
        self._changed = threading.Condition()
        self.closed = False

    def append(self, data: bytes) -> None:
        """Append whole lines (already normalized); thread-safe."""
        if not data:
            return
        with self._changed:
            if self.closed:
                return
            self._file.write(data)
            self.size += len(data)
            self.lines += data.count(b"\n")
            self._changed.notify_all()

    def append_output(self, data: bytes, max_bytes: int = MAX_LINE_BYTES) -> None:
        self.append(normalize_output(data, max_bytes))

    def write_line(self, text: str) -> None:
        """A line of the runner's own (a text with newlines becomes several lines)."""
        self.append(line_bytes(text))

    def extent(self) -> tuple[int, int]:
        """(bytes, lines) written so far; the bytes end at a line boundary."""
        with self._changed:
            return self.size, self.lines

    def end(self) -> int:
        return self.extent()[0]

    def open_reader(self) -> BinaryIO:
        return open(self.path, "rb")

    def wait_beyond(self, offset: int, timeout: float) -> tuple[int, bool]:
        """Wait until the file is longer than `offset` or closed; (size, closed)."""
        with self._changed:
            self._changed.wait_for(lambda: self.size > offset or self.closed, timeout)
            return self.size, self.closed

    def close(self) -> None:
        with self._changed:
            if not self.closed:
                self.closed = True
                self._file.close()
            self._changed.notify_all()


def _widen_pipe(fd: int) -> None:
    with contextlib.suppress(OSError):
        fcntl.fcntl(fd, _F_SETPIPE_SZ, PIPE_BYTES)


def capture_output(
    fd: int,
    log: LearnerLog,
    max_bytes: int = MAX_LINE_BYTES,
    gather_s: float = GATHER_S,
    clock: Callable[[], float] = time.monotonic,
) -> str:
    """Copy the command's output from pipe `fd` into `log` until EOF; returns the last
    non-blank line. A line longer than `max_bytes` is cut and marked, its rest skipped.

    A program printing line after line would wake this reader for every line, and on a
    shared core each wake-up costs the program a switch and this loop's work. So when a
    read found whole lines within `gather_s` and less than `GATHER_BYTES` of them, the
    reader waits `gather_s` before the next read: a flood is read every `gather_s` (some
    KiB at a time, far from filling the pipe), while a line after a quiet spell, or the
    rest of a line begun, is read at once."""
    _widen_pipe(fd)
    pending = b""
    skipping = False
    last = b""
    gather = False
    while True:
        if gather:
            time.sleep(gather_s)
        asked = clock()
        chunk = os.read(fd, READ_BYTES)
        if not chunk:
            break
        found_soon = clock() - asked < gather_s and len(chunk) < GATHER_BYTES
        gather = False
        if skipping:
            newline = chunk.find(b"\n")
            if newline < 0:
                continue
            chunk = chunk[newline + 1 :]
            skipping = False
        data = pending + chunk if pending else chunk
        cut = data.rfind(b"\n") + 1
        pending = data[cut:]
        if cut:
            complete = data[:cut]
            log.append_output(complete, max_bytes)
            tail = complete.rstrip()
            if tail:
                last = tail[tail.rfind(b"\n") + 1 :]
        if len(pending) > max_bytes:
            log.append_output(pending + b"\n", max_bytes)
            last, pending, skipping = pending[:max_bytes], b"", True
        # The rest of a line is never kept waiting: `print(a, b)` writes a, " ", b, "\n".
        gather = found_soon and not pending
    if pending:
        log.append_output(pending + b"\n", max_bytes)
        if pending.strip():
            last = pending
    return _stored_line(last, max_bytes).strip()
