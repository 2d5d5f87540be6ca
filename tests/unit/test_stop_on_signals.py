"""A process stopped by SIGTERM or SIGHUP unwinds as after Ctrl-C: its `finally` runs, so
what it started (an embedded platform) is stopped on the way out."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

PROGRAM = """
import pathlib, sys, time
from tests.stop_on_signals import stopped_on_signals
started, stopped = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
with stopped_on_signals():
    try:
        started.touch()
        time.sleep(120)
    finally:
        stopped.write_text("stopped its platform")
"""


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
def test_a_stopping_signal_runs_the_finally_that_stops_the_platform(
    tmp_path: Path, signum: signal.Signals
) -> None:
    started, stopped = tmp_path / "started", tmp_path / "stopped"
    root = Path(__file__).resolve().parents[2]
    process = subprocess.Popen(
        [sys.executable, "-c", PROGRAM, str(started), str(stopped)], cwd=root
    )
    try:
        deadline = time.monotonic() + 60
        while not started.exists():
            assert process.poll() is None and time.monotonic() < deadline, "never started"
            time.sleep(0.05)
        process.send_signal(signum)
        process.wait(30)
    finally:
        process.kill()
    assert stopped.read_text() == "stopped its platform"
