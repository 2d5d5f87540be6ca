"""Exactly once and no deadlock under stress: 4 learners, 100,000 updates, random pauses and
random SIGKILLs of learners (mid-write among them); the staleness bound always holds."""

from __future__ import annotations

import random
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from learner_image.ps.model_file import ModelFile
from learner_image.ps.region import L_COMMITTED, S_APPLIED, S_MAX_STALENESS, V_IN_WEIGHTS
from tests.integration.ps_harness import ROOT, ThreadServer, control, drained, wait_for
from tests.integration.ps_stress_learner import BLOCK, SLOTS

TARGET = 100_000
BOUND = 3


@pytest.fixture
def region() -> Iterator[Path]:
    directory = Path(tempfile.mkdtemp(prefix="dlaas-ps-test-", dir="/dev/shm"))
    yield directory
    shutil.rmtree(directory, ignore_errors=True)


def spawn(directory: Path, slot: int, seed: int) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.integration.ps_stress_learner",
            str(directory),
            str(slot),
            str(TARGET),
            str(seed),
        ],
        cwd=ROOT,
    )


def test_every_committed_gradient_is_applied_once_despite_kills(region: Path) -> None:
    server = ThreadServer(
        [
            "--dir",
            str(region),
            "--slots",
            str(SLOTS),
            "--mode",
            "async",
            "--staleness",
            str(BOUND),
            "--threads",
            "1",
            "--snapshot-interval",
            "0",
        ]
    )
    rng = random.Random(5)
    seeds = iter(range(1000))
    learners = {slot: spawn(region, slot, next(seeds)) for slot in range(SLOTS)}
    ctl = control(region)
    kills = 0
    try:
        deadline = time.monotonic() + 150
        while any(p.poll() is None for p in learners.values()):
            assert time.monotonic() < deadline, "no progress: deadlock?"
            time.sleep(rng.uniform(0.05, 0.3))
            so_far = sum(int(s.learner[L_COMMITTED]) for s in ctl.slots)
            if so_far < 0.9 * TARGET:
                slot = rng.randrange(SLOTS)
                learners[slot].kill()
                learners[slot].wait()
                kills += 1
                learners[slot] = spawn(region, slot, next(seeds))
            for slot, process in learners.items():
                if process.poll() not in (None, 0):
                    learners[slot] = spawn(region, slot, next(seeds))
        wait_for(lambda: drained(ctl), 30, "the last gradients to be applied")
    finally:
        for process in learners.values():
            process.kill()
        server.stop()

    committed = [int(s.learner[L_COMMITTED]) for s in ctl.slots]
    assert sum(committed) >= TARGET
    assert kills >= 10
    assert int(ctl.server[S_APPLIED]) == sum(committed)
    assert [int(s.server[V_IN_WEIGHTS]) for s in ctl.slots] == committed
    weights = ModelFile(region).read().vector
    for slot in range(SLOTS):
        block = weights[slot * BLOCK : (slot + 1) * BLOCK]
        # no gradient lost, doubled or applied in part: every element counts each exactly once
        assert np.all(block == committed[slot]), (slot, committed[slot], np.unique(block))
    assert 0 < int(ctl.server[S_MAX_STALENESS]) <= BOUND
