"""Exactly once and no deadlock under stress: 4 learners, 100,000 updates, random pauses and
random SIGKILLs of learners (mid-write among them); the staleness bound always holds, as the
server counts it and as the learners see it. Bounded mode: no learner is ever released
further ahead of the slowest one than its bound, again as the learners see it."""

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
from learner_image.ps.region import (
    L_COMMITTED,
    S_APPLIED,
    S_MAX_GAP,
    S_MAX_STALENESS,
    V_IN_WEIGHTS,
    Control,
)
from tests.integration.ps_harness import ROOT, ThreadServer, control, settled, wait_for
from tests.integration.ps_stress_learner import (
    BLOCK,
    SEEN_GAP,
    SEEN_UPDATES,
    SLOTS,
    observations_file,
)

TARGET = 100_000
BOUNDED_TARGET = 20_000
BOUND = 3


@pytest.fixture
def region() -> Iterator[Path]:
    directory = Path(tempfile.mkdtemp(prefix="dlaas-ps-test-", dir="/dev/shm"))
    yield directory / "region"
    shutil.rmtree(directory, ignore_errors=True)


def observations(region: Path) -> Path:
    """The file the learners record what they see in (`ps_stress_learner`)."""
    return region.parent / "observations"


def spawn(region: Path, slot: int, seed: int, target: int = TARGET) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.integration.ps_stress_learner",
            str(region),
            str(slot),
            str(target),
            str(seed),
            str(observations(region)),
        ],
        cwd=ROOT,
    )


def start_server(region: Path, mode: str) -> ThreadServer:
    observations(region).write_bytes(bytes(SLOTS * 2 * 8))
    return ThreadServer(
        [
            "--dir",
            str(region),
            "--slots",
            str(SLOTS),
            "--mode",
            mode,
            "--staleness",
            str(BOUND),
            "--threads",
            "1",
            "--snapshot-interval",
            "0",
        ]
    )


def check_each_gradient_applied_once(ctl: Control, region: Path) -> list[int]:
    committed = [int(s.learner[L_COMMITTED]) for s in ctl.slots]
    assert int(ctl.server[S_APPLIED]) == sum(committed)
    assert [int(s.server[V_IN_WEIGHTS]) for s in ctl.slots] == committed
    weights = ModelFile(region).read().vector
    for slot in range(SLOTS):
        block = weights[slot * BLOCK : (slot + 1) * BLOCK]
        # no gradient lost, doubled or applied in part: every element counts each exactly once
        assert np.all(block == committed[slot]), (slot, committed[slot], np.unique(block))
    return committed


def test_every_committed_gradient_is_applied_once_despite_kills(region: Path) -> None:
    server = start_server(region, "async")
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
        wait_for(lambda: settled(ctl), 30, "the last gradients to be applied")
    finally:
        for process in learners.values():
            process.kill()
        server.stop()

    committed = check_each_gradient_applied_once(ctl, region)
    assert sum(committed) >= TARGET
    assert kills >= 10
    assert 0 < int(ctl.server[S_MAX_STALENESS]) <= BOUND
    # the learners' own count: updates that landed while one computed, at most the bound
    seen = observations_file(observations(region))[:, SEEN_UPDATES]
    assert 0 < int(seen.max()) <= BOUND, seen


def test_bounded_mode_never_lets_a_learner_run_further_ahead_than_the_bound(
    region: Path,
) -> None:
    server = start_server(region, "bounded")
    learners = [spawn(region, slot, slot, BOUNDED_TARGET) for slot in range(SLOTS)]
    ctl = control(region)
    try:
        for process in learners:
            assert process.wait(120) == 0
        wait_for(lambda: settled(ctl), 30, "the last gradients to be applied")
    finally:
        for process in learners:
            process.kill()
        server.stop()

    committed = check_each_gradient_applied_once(ctl, region)
    assert sum(committed) >= BOUNDED_TARGET
    assert int(ctl.server[S_MAX_GAP]) <= BOUND
    seen = observations_file(observations(region))[:, SEEN_GAP]
    assert 0 < int(seen.max()) <= BOUND, seen
