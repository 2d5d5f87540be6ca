"""What a learner pod's containers leave each other in files.

In the shared directory (`.dlaas/` under DLAAS_SHARED_DIR), from the program's container to
the shipper: `running`, locked (flock) for as long as the launcher lives, so the shipper
knows when the program's container ended without a word (killed outright); `heartbeat`,
refreshed every `HEARTBEAT_S` while no process of the command is stopped; `exit.json`, the
`ProgramEnd` of the command, written (atomically) once it ended and its leftovers were
killed. The program may change these files as it likes: it can lie only about itself, and
the shipper reads them through no link (`open_inside`) and bounded.

In the helpers' directory (DLAAS_RUNNER_DIR), from the fetch container to the shipper:
`start.json`, the restored checkpoint and where this attempt's part of the log starts.
"""

from __future__ import annotations

import fcntl
import json
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

from learner_image.checkpoint_sync import open_inside
from learner_image.launcher import HEARTBEAT_S, ProgramEnd

CONTROL = ".dlaas"
RUNNING, HEARTBEAT, EXIT = "running", "heartbeat", "exit.json"
START = "start.json"
FRESH_S = 2.5 * HEARTBEAT_S  # a heartbeat file older than this: the program is frozen
MAX_RECORD_BYTES = 64 << 10
POLL_S = 0.1
LEFTOVERS_S = 10.0  # how long the launcher may take to exit once its exit status is out


def _write_atomically(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


class ProgramSide:
    """The program's container's side."""

    def __init__(self, shared: Path) -> None:
        self.dir = shared / CONTROL
        self.dir.mkdir(parents=True, exist_ok=True)
        self._running: int | None = None

    def announce(self) -> None:
        """The launcher lives: lock `running` (locked before it has its name, so a shipper
        never sees it unlocked while the launcher lives); not inherited by the command."""
        tmp = self.dir / f".{RUNNING}.tmp"
        fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
        fcntl.flock(fd, fcntl.LOCK_EX)
        os.replace(tmp, self.dir / RUNNING)
        self._running = fd
        (self.dir / HEARTBEAT).touch()

    def beat(self) -> None:
        os.utime(self.dir / HEARTBEAT)

    def ended(self, end: ProgramEnd) -> None:
        _write_atomically(self.dir / EXIT, json.dumps(end.to_dict()))


class ShipperSide:
    """The shipper's side: what the program's container says, read from the shared dir."""

    def __init__(self, shared: Path) -> None:
        self.shared = shared

    def _open(self, name: str) -> BinaryIO:
        return open_inside(self.shared, f"{CONTROL}/{name}")

    def beating(self) -> bool:
        """Whether the program's container refreshed its heartbeat file of late."""
        try:
            with self._open(HEARTBEAT) as f:
                age = time.time() - os.fstat(f.fileno()).st_mtime
        except OSError:
            return False
        return age <= FRESH_S

    def end(self) -> ProgramEnd | None:
        """The exit status the program's container left, if it left one."""
        try:
            with self._open(EXIT) as f:
                raw = f.read(MAX_RECORD_BYTES)
        except OSError:
            return None
        try:
            return ProgramEnd.from_dict(json.loads(raw))
        except (ValueError, TypeError, KeyError, AttributeError):
            return ProgramEnd(None, failure="the program's exit status could not be read")

    def started(self) -> bool:
        return (self.shared / CONTROL / RUNNING).exists()

    def launcher_alive(self) -> bool:
        try:
            f = self._open(RUNNING)
        except OSError:
            return False
        with f:
            try:
                fcntl.flock(f.fileno(), fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                return True
            return False

    def wait_end(self, stop_signal: Callable[[], int | None]) -> ProgramEnd:
        """Wait until the program's container is done: its exit status once the launcher
        is gone (its leftovers with it); a SIGKILL when it ended without one; a stop before
        the start when the shipper is stopped before the program's container started."""
        while True:
            end = self.end()
            if end is not None:
                deadline = time.monotonic() + LEFTOVERS_S
                while self.launcher_alive() and time.monotonic() < deadline:
                    time.sleep(POLL_S)
                return end
            if self.started():
                if not self.launcher_alive():
                    return self.end() or ProgramEnd(-signal.SIGKILL, stop_signal())
            elif stop_signal() is not None:
                return ProgramEnd(None, stop_signal())
            time.sleep(POLL_S)


def leave_start(runner_dir: Path, restored: str | None, origin: tuple[int, int]) -> None:
    runner_dir.mkdir(parents=True, exist_ok=True)
    record = {"restored": restored, "log_origin": list(origin)}
    _write_atomically(runner_dir / START, json.dumps(record))


def read_start(runner_dir: Path) -> tuple[str | None, tuple[int, int]]:
    """(restored checkpoint, log origin) the fetch container left; OSError/ValueError."""
    raw = json.loads((runner_dir / START).read_text())
    restored = raw["restored"]
    size, lines = raw["log_origin"]
    return (None if restored is None else str(restored)), (int(size), int(lines))
