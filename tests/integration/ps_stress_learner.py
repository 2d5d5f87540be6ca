"""A learner for the parameter-server stress test (run as a process, killed at random).

    python -m tests.integration.ps_stress_learner DIR SLOT TARGET SEED [OBSERVATIONS]

Its gradient is 1.0 on its own block of the model and 0 elsewhere, written in two halves
with random pauses (so kills land mid-write), committed with lr -1: applied exactly once,
each gradient adds exactly 1 to every element of the block. It stops once the slots'
commits add up to TARGET.

With OBSERVATIONS (a file of `SLOTS` x 2 int64, made by the test), it records in its
slot's row what it saw itself, apart from the server's own counters: the most updates
that landed on the weights while it computed a gradient (the version before its commit
less the version it read; async and sync bound it), and in bounded mode the most steps it
was ahead of the slowest learner alive when released (its commits less theirs). In
bounded mode it starts once every slot has attached, so that no learner is yet to count.
"""

from __future__ import annotations

import random
import sys
import time
from pathlib import Path

import numpy as np

from learner_image.ps.client import ParameterServer
from learner_image.ps.layout import SGD, Mode, ModelLayout
from learner_image.ps.region import L_COMMITTED, V_ATTACH_ACK
from learner_image.ps.shm import is_locked

NUMEL = 1024
SLOTS = 4
BLOCK = NUMEL // SLOTS
SEEN_UPDATES, SEEN_GAP = 0, 1


def observations_file(path: Path) -> np.memmap:
    return np.memmap(path, dtype=np.int64, mode="r+", shape=(SLOTS, 2))


def gap_to_slowest(client: ParameterServer) -> int:
    """How many commits this learner is ahead of the slowest other learner still attached."""
    slots = client.control.slots
    mine = client.slot.committed
    others = [
        int(s.learner[L_COMMITTED])
        for i, s in enumerate(slots)
        if i != client.slot.index and is_locked(client.paths.slot_lock(i))
    ]
    return mine - min(others) if others else 0


def main() -> None:
    directory, slot, target, seed = Path(sys.argv[1]), *map(int, sys.argv[2:5])
    seen = observations_file(Path(sys.argv[5]))[slot] if len(sys.argv) > 5 else None
    rng = random.Random(seed)
    client = ParameterServer(directory, slot, timeout=30)
    client.attach(ModelLayout.of([("w", (NUMEL,))]), SGD(lr=1.0), np.zeros(NUMEL, np.float32))
    gradient = client.gradient
    block = slice(slot * BLOCK, (slot + 1) * BLOCK)
    half = slot * BLOCK + BLOCK // 2
    slots = client.control.slots
    bounded = client.mode is Mode.BOUNDED
    while bounded and not all(int(s.server[V_ATTACH_ACK]) for s in slots):
        time.sleep(0.001)
    read_version = client.version
    while sum(int(s.learner[L_COMMITTED]) for s in slots) < target:
        gradient[:] = 0.0
        gradient[block.start : half] = 1.0
        if rng.random() < 0.002:
            time.sleep(rng.random() * 0.003)
        gradient[half : block.stop] = 1.0
        if seen is not None:
            seen[SEEN_UPDATES] = max(int(seen[SEEN_UPDATES]), client.version - read_version)
        client.push(-1.0)
        read_version = client.version
        if seen is not None and bounded:
            seen[SEEN_GAP] = max(int(seen[SEEN_GAP]), gap_to_slowest(client))
    client.close()


if __name__ == "__main__":
    main()
