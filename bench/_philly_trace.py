"""Job shapes like those of published GPU-cluster traces (Microsoft's Philly, ATC '19).

Most jobs ask for one GPU; a heavy tail asks for 8 to 64, as gangs of 8-GPU learners.
Durations are log-normal (median 20 minutes, a tail of days). Users' runtime estimates
(`max_runtime`) run long: the true duration times 1 to 2.
"""

from __future__ import annotations

import math
import random

from lifecycle_manager.scheduler import GIB, Gang

GPU_COUNTS = (1, 2, 4, 8, 16, 32, 64)
GPU_WEIGHTS = (0.62, 0.12, 0.12, 0.09, 0.03, 0.015, 0.005)
MEDIAN_DURATION_S = 1200.0
DURATION_SIGMA = 1.6
MAX_DURATION_S = 3 * 86_400.0
GPUS_PER_NODE = 8


def job_gpus(rng: random.Random) -> int:
    return rng.choices(GPU_COUNTS, GPU_WEIGHTS)[0]


def gang_for(gpus: int, product: str | None) -> Gang:
    """A job of `gpus` GPUs: one learner up to a node's 8, else learners of 8 each."""
    learners = max(1, gpus // GPUS_PER_NODE)
    per_learner = gpus // learners
    return Gang(learners, per_learner, product, per_learner * 6000, per_learner * 48 * GIB)


def duration_s(rng: random.Random) -> float:
    drawn = rng.lognormvariate(math.log(MEDIAN_DURATION_S), DURATION_SIGMA)
    return min(max(drawn, 60.0), MAX_DURATION_S)


def runtime_estimate_s(rng: random.Random, duration: float) -> float:
    return duration * rng.uniform(1.0, 2.0)


def mean_gpu_seconds(samples: int = 200_000, seed: int = 1) -> float:
    """The mean GPU-seconds of a job (for choosing an arrival rate for a load)."""
    rng = random.Random(seed)
    return sum(job_gpus(rng) * duration_s(rng) for _ in range(samples)) / samples
