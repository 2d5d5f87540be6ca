"""Liveness of the lifecycle manager's long-running processes, for exec probes.

A process shows it is alive by refreshing a heartbeat file (`DLAAS_LIVENESS_FILE`) from
the loop that does its work: the monitor at every pass of its read loop, the beat at every
tick of its schedule, the pod watcher every few seconds while its watch thread and its
delivery are running. A process that died, or whose loop hangs, stops refreshing it. The
probe

    python -m lifecycle_manager.liveness FILE --max-age SECONDS

exits 1 when the file is missing or older than that, 0 otherwise. It imports nothing but
the standard library, so it costs a Python start-up and a `stat`.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections.abc import Callable
from pathlib import Path

BEAT_EVERY_S = 2.0  # refreshes closer together than this are skipped
KEEP_BEATING_EVERY_S = 5.0


class Heartbeat:
    """Refreshes `path` (when one is configured) at most every `every_s` seconds, so it is
    cheap to call from a busy loop. A file left by an earlier run is removed at once: only
    this process's beats count."""

    def __init__(
        self,
        path: Path | None,
        every_s: float = BEAT_EVERY_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.path = path
        self.every_s = every_s
        self.clock = clock
        self._last: float | None = None
        if path is not None:
            path.unlink(missing_ok=True)

    def beat(self) -> None:
        if self.path is None:
            return
        now = self.clock()
        if self._last is not None and now - self._last < self.every_s:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.touch()
        self._last = now


async def keep_beating(
    heartbeat: Heartbeat, working: Callable[[], bool], every_s: float = KEEP_BEATING_EVERY_S
) -> None:
    """Beat every `every_s` seconds for as long as the event loop runs and `working()`
    says the process's other parts (threads, tasks) are still going."""
    while True:
        if working():
            heartbeat.beat()
        await asyncio.sleep(every_s)


def staleness(path: Path, max_age_s: float, now: float | None = None) -> str | None:
    """Why the heartbeat at `path` shows no life, or None if it was refreshed in time."""
    try:
        refreshed = path.stat().st_mtime
    except FileNotFoundError:
        return f"{path} does not exist: the process has not started its loop, or is not alive"
    age = (time.time() if now is None else now) - refreshed
    if age > max_age_s:
        return f"{path} was last refreshed {age:.0f} s ago, more than {max_age_s:g} s"
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lifecycle_manager.liveness")
    parser.add_argument("file", type=Path, help="the heartbeat file (DLAAS_LIVENESS_FILE)")
    parser.add_argument("--max-age", type=float, default=60.0, help="seconds (default 60)")
    args = parser.parse_args(argv)
    problem = staleness(args.file, args.max_age)
    if problem is not None:
        print(f"not alive: {problem}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
