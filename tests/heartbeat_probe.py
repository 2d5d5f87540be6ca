"""Check a deployment's heartbeat wiring: the beat's scheduler refreshes the file, and the
probe command, run here on a heartbeat file of the test's own, tells a stale one."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from lifecycle_manager.entrypoints.beat import HeartbeatScheduler

ROOT = Path(__file__).resolve().parents[1]


def assert_probe_tells_a_stale_heartbeat(probe: Sequence[str], tmp_path: Path) -> None:
    """`probe` is `python -m lifecycle_manager.liveness FILE --max-age S` as deployed: it must
    fail on a file never refreshed, pass on a fresh one and fail on one older than S."""
    assert list(probe[:3]) == ["python", "-m", "lifecycle_manager.liveness"]
    assert probe[4] == "--max-age"
    local = tmp_path / "alive"
    run = [sys.executable, *probe[1:3], str(local), *probe[4:]]
    assert subprocess.run(run, cwd=ROOT, capture_output=True).returncode == 1  # never refreshed
    local.touch()
    assert subprocess.run(run, cwd=ROOT, capture_output=True).returncode == 0
    os.utime(local, (time.time() - 2 * float(probe[5]),) * 2)
    assert subprocess.run(run, cwd=ROOT, capture_output=True).returncode == 1  # hung or dead


def assert_beat_refreshes_its_heartbeat(command: Sequence[str]) -> None:
    """The beat's `--scheduler` is dlaas's: the stock scheduler refreshes no heartbeat."""
    module, name = command[command.index("--scheduler") + 1].split(":")
    assert issubclass(getattr(importlib.import_module(module), name), HeartbeatScheduler)
