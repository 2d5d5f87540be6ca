"""Parameter servers for tests: in this process (a thread) or as a real `dlaas-ps` process."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest

from learner_image.ps.region import L_COMMITTED, V_RELEASED, Control, RegionPaths
from learner_image.ps.server import Server, open_snapshots
from learner_image.ps.server_config import parse_config

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def base() -> Iterator[Path]:
    """A fresh directory in /dev/shm for a test's regions, peer files and logs."""
    directory = Path(tempfile.mkdtemp(prefix="dlaas-ps-test-", dir="/dev/shm"))
    yield directory
    shutil.rmtree(directory, ignore_errors=True)


def sidecar_args(
    base: Path, rank: int, world: int, mode: Sequence[str], extra: Sequence[str] = ()
) -> list[str]:
    """`dlaas-ps` arguments of rank `rank` of a multi-pod job whose files are under `base`:
    one slot, one thread, no snapshots, peers found through `base/peers`."""
    return [
        "--dir",
        str(base / f"region-{rank}"),
        "--slots",
        "1",
        "--mode",
        *mode,
        "--rank",
        str(rank),
        "--world",
        str(world),
        "--peers-dir",
        str(base / "peers"),
        "--listen",
        "127.0.0.1:0",
        "--threads",
        "1",
        "--snapshot-interval",
        "0",
        *extra,
    ]


class ThreadServer:
    """A `Server` running in a thread of the test process."""

    def __init__(self, args: list[str]) -> None:
        self.config = parse_config(args, {})
        snapshots = open_snapshots(self.config)
        exchange = None
        if self.config.distributed:
            from learner_image.ps.exchange import open_exchange

            exchange = open_exchange(self.config)
        self.server = Server(self.config, snapshots, exchange)
        self.server.open()
        self.stop_event = threading.Event()
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            self.server.run(self.stop_event)
        except BaseException as error:  # surfaced by stop()
            self.error = error

    def stop(self, timeout: float = 30.0) -> None:
        self.stop_event.set()
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "the server thread did not stop"
        if self.error is not None:
            raise self.error


def process_server(args: list[str], log: Path) -> subprocess.Popen[bytes]:
    with open(log, "ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "learner_image.ps.server", *args], cwd=ROOT, stderr=out
        )


def control(directory: Path, timeout: float = 30.0) -> Control:
    paths = RegionPaths(directory)
    wait_for(paths.control.exists, timeout, "the control file")
    return Control.open(paths)


def settled(control: Control) -> bool:
    """Every committed gradient applied and its counters written: each slot released (a
    slot is drained before its update is applied, released once the update is counted)."""
    return all(int(s.learner[L_COMMITTED]) == int(s.server[V_RELEASED]) for s in control.slots)


def wait_for(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)
