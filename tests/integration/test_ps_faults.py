"""A parameter server killed mid-training: its successor restores and the learners go on."""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch

from learner_image.ps.client import ParameterServer
from learner_image.ps.layout import SGD, ModelLayout
from learner_image.ps.model_file import ModelFile
from learner_image.ps.region import (
    L_COMMITTED,
    S_APPLIED,
    S_LOST,
    S_MODEL,
    S_PID,
    S_SNAPSHOT,
    V_IN_WEIGHTS,
    W_SEQ,
    RegionPaths,
)
from learner_image.ps.shm import map_file, words
from tests.integration.ps_harness import (
    ROOT,
    ThreadServer,
    control,
    process_server,
    settled,
    wait_for,
)
from tests.integration.ps_stress_learner import BLOCK

# Two learners push about 30,000 updates a second here: enough that the server is killed
# well before they are done, so they must wait for its successor to finish.
TARGET = 60_000


@pytest.fixture
def dirs() -> Iterator[tuple[Path, Path]]:
    base = Path(tempfile.mkdtemp(prefix="dlaas-ps-test-", dir="/dev/shm"))
    yield base / "region", base / "snapshots"
    shutil.rmtree(base, ignore_errors=True)


def learner(region: Path, slot: int) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.integration.ps_stress_learner",
            str(region),
            str(slot),
            str(TARGET),
            str(slot),
        ],
        cwd=ROOT,
    )


def test_killed_server_restores_its_snapshot_and_learners_continue(
    dirs: tuple[Path, Path],
) -> None:
    region, snapshots = dirs
    args = [
        "--dir",
        str(region),
        "--slots",
        "2",
        "--mode",
        "async",
        "--threads",
        "1",
        "--snapshot-dir",
        str(snapshots),
        "--snapshot-interval",
        "0.2",
    ]
    log = region.parent / "server.log"
    first = process_server(args, log)
    learners = [learner(region, slot) for slot in range(2)]
    second = None
    try:
        ctl = control(region)
        wait_for(
            lambda: int(ctl.server[S_SNAPSHOT]) > 0 and int(ctl.server[S_APPLIED]) > 1000,
            60,
            "a snapshot",
        )
        assert all(p.poll() is None for p in learners), "the learners finished before the kill"
        first.kill()
        first.wait()
        # As if it died in the middle of an update: the weights are torn, so the next
        # server must take the snapshot, not the weights it finds.
        header = words(map_file(RegionPaths(region).weights), 0, 6)
        header[W_SEQ] = int(header[W_SEQ]) | 1
        applied_at_kill = int(ctl.server[S_APPLIED])

        second = process_server(args, log)
        wait_for(
            lambda: int(ctl.server[S_PID]) == second.pid and int(ctl.server[S_MODEL]) == 1,
            30,
            "the new server to serve the restored model",
        )
        for process in learners:
            assert process.wait(90) == 0  # they waited for the new server, then finished
        wait_for(lambda: settled(ctl), 30, "the last gradients")
        committed = [int(s.learner[L_COMMITTED]) for s in ctl.slots]
        in_weights = [int(s.server[V_IN_WEIGHTS]) for s in ctl.slots]
        weights = ModelFile(region).read().vector
        for slot in range(2):
            assert np.all(weights[slot * BLOCK : (slot + 1) * BLOCK] == in_weights[slot])
        assert int(ctl.server[S_APPLIED]) == sum(in_weights)
        lost = int(ctl.server[S_LOST])
        assert sum(in_weights) + lost == sum(committed) >= TARGET
        assert lost <= applied_at_kill  # only what came after the snapshot is lost

        second.send_signal(signal.SIGTERM)  # a clean stop takes a last snapshot
        assert second.wait(30) == 0
        assert "torn weights: restored the snapshot of version" in log.read_text()
        final = ModelFile(region).read()
    finally:
        for process in [first, *learners, *([second] if second else [])]:
            if process.poll() is None:
                process.kill()

    # The pod is replaced: no region at all; the new server starts from the last snapshot.
    shutil.rmtree(region)
    third = ThreadServer(args)
    try:
        wait_for(RegionPaths(region).weights.exists, 30, "the restored model")
        restored = ModelFile(region).read()
        assert restored.version == final.version
        assert np.array_equal(restored.vector, final.vector)
    finally:
        third.stop()


class Died(Exception):
    """Stands for the server process being killed."""


def test_a_server_dying_mid_update_without_snapshots_never_applies_a_part_twice(
    dirs: tuple[Path, Path],
) -> None:
    region, _ = dirs
    args = ["--dir", str(region), "--slots", "1", "--threads", "1", "--snapshot-interval", "0"]
    first = ThreadServer(args)
    numel = 2 * BLOCK
    client = ParameterServer(region, 0, timeout=30)
    client.attach(ModelLayout.of([("w", (numel,))]), SGD(lr=1.0), np.zeros(numel, np.float32))
    half = slice(0, numel // 2)

    def die_half_way(grads: list[torch.Tensor], *rest: object) -> None:
        first.server.weights[half].add_(grads[0][half])  # lr -1: w + g
        raise Died

    first.server.kernel.apply = die_half_way  # type: ignore[assignment,method-assign]
    first.server.kernel.apply_each = die_half_way  # type: ignore[assignment,method-assign]
    client.gradient[:] = 1.0
    client.commit(-1.0)
    first.thread.join(30)
    assert isinstance(first.error, Died)
    first.server._lock.release()  # as the kernel does for a process that died

    second = ThreadServer(args)
    try:
        ctl = second.server.control
        wait_for(lambda: int(ctl.server[S_MODEL]) == 1, 30, "the successor")
        client.wait_released(30)
        weights = ModelFile(region).read().vector
        assert np.all(weights[half] == 1.0) and np.all(weights[numel // 2 :] == 0.0)
        assert int(ctl.server[S_LOST]) == 1
        client.push(-1.0, timeout=30)  # the learner goes on; its next gradient lands whole
        weights = ModelFile(region).read().vector
        assert np.all(weights[half] == 2.0) and np.all(weights[numel // 2 :] == 1.0)
        client.close()
    finally:
        second.stop()
