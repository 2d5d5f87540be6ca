"""A learner for the parameter-server stress test (run as a process, killed at random).

    python -m tests.integration.ps_stress_learner DIR SLOT TARGET SEED

Its gradient is 1.0 on its own block of the model and 0 elsewhere, written in two halves
with random pauses (so kills land mid-write), committed with lr -1: applied exactly once,
each gradient adds exactly 1 to every element of the block. It stops once the slots'
commits add up to TARGET.
"""

from __future__ import annotations

import random
import sys
import time
from pathlib import Path

import numpy as np

from learner_image.ps.client import ParameterServer
from learner_image.ps.layout import SGD, ModelLayout
from learner_image.ps.region import L_COMMITTED

NUMEL = 1024
SLOTS = 4
BLOCK = NUMEL // SLOTS


def main() -> None:
    directory, slot, target, seed = Path(sys.argv[1]), *map(int, sys.argv[2:5])
    rng = random.Random(seed)
    client = ParameterServer(directory, slot, timeout=30)
    client.attach(ModelLayout.of([("w", (NUMEL,))]), SGD(lr=1.0), np.zeros(NUMEL, np.float32))
    gradient = client.gradient
    block = slice(slot * BLOCK, (slot + 1) * BLOCK)
    half = slot * BLOCK + BLOCK // 2
    slots = client.control.slots
    while sum(int(s.learner[L_COMMITTED]) for s in slots) < target:
        gradient[:] = 0.0
        gradient[block.start : half] = 1.0
        if rng.random() < 0.002:
            time.sleep(rng.random() * 0.003)
        gradient[half : block.stop] = 1.0
        client.push(-1.0)
    client.close()


if __name__ == "__main__":
    main()
