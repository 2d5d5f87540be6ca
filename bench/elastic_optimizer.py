"""How long the elastic optimizer takes to size 200 jobs on 512 GPUs.

Jobs as `tests/unit/scheduler/test_elastic_optimizer.py` draws them, at this scale: costs
from the performance model at random (compute per sample and per step, 10-400 MiB of
gradients, 10 or 100 Gb/s links), 1 or 2 GPUs per learner, at least 1-2 learners and at most
4-64, each learner count with the largest batch it may run (32 or 64 samples a learner);
half of them running. `optimize` is timed `--repeats` times (the median is the figure);
the baseline, in the same run, is the same recurrence written as plain Python loops, once:
it must find the same optimum, and its time shows what the vectorised form saves.

Figures: `optimizer_ms_200x512` (median; target 50), `optimizer_ms_p90_200x512`,
`loops_ms_200x512`, `speedup_vs_loops`, `choices` (learner counts offered in all),
`same_optimum`, `value`, `gpus_used`, `jobs_running_after`.

Run from the repository root: `python -m bench.elastic_optimizer` (under a minute). The
last line is the FINAL line, one JSON object `{"bench": "elastic_optimizer", ...}`.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import time

from bench._latency_stats import median, percentile, rounded
from bench._small import parse_with_small
from lifecycle_manager.scheduler.elastic_optimizer import Choice, ElasticJob, optimize, speedup
from storage.performance_model import Exchange, ModelCosts, Network, throughput

JOBS = 200
GPUS = 512
TARGET_MS = 50.0


def make_jobs(rng: random.Random) -> list[ElasticJob]:
    jobs = []
    for i in range(JOBS):
        costs = ModelCosts(
            sample_s=rng.uniform(0.001, 0.01),
            step_overhead_s=rng.uniform(0.005, 0.05),
            model_bytes=rng.choice([10, 100, 400]) << 20,
        )
        network = Network(bandwidth_bytes_s=rng.choice([1.25e9, 1.25e10]), latency_s=5e-5)
        least, most = rng.randint(1, 2), rng.choice([4, 8, 16, 32, 64])
        per_learner = rng.choice([32, 64])
        choices = tuple(
            Choice(
                n,
                n * per_learner,
                throughput(costs, network, n, n * per_learner, Exchange.ALL_REDUCE),
            )
            for n in range(least, most + 1)
        )
        jobs.append(ElasticJob(f"job-{i}", rng.choice([1, 2]), choices, running=i % 2 == 0))
    return jobs


def loops_optimum(jobs: list[ElasticJob], gpus: int) -> float:
    """The optimizer's recurrence in plain loops: the most total speedup within `gpus`."""
    best = [0.0] * (gpus + 1)
    for job in jobs:
        options = [(job.gpus(c), speedup(job, c)) for c in job.choices]
        after = [best[c] if not job.running else -math.inf for c in range(gpus + 1)]
        for c in range(gpus + 1):
            for size, value in options:
                if size <= c and best[c - size] + value > after[c]:
                    after[c] = best[c - size] + value
        best = after
    return best[gpus]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--repeats", type=int, default=21)
    args = parse_with_small(parser, {"repeats": 3})
    jobs = make_jobs(random.Random(args.seed))
    optimize(jobs, GPUS)  # warm-up
    times = []
    for _ in range(args.repeats):
        started = time.perf_counter()
        plan = optimize(jobs, GPUS)
        times.append((time.perf_counter() - started) * 1000)
    assert plan is not None
    started = time.perf_counter()
    expected = loops_optimum(jobs, GPUS)
    loops_ms = (time.perf_counter() - started) * 1000
    figures = {
        "bench": "elastic_optimizer",
        "jobs": JOBS,
        "gpus": GPUS,
        "choices": sum(len(job.choices) for job in jobs),
        "optimizer_ms_200x512": rounded(median(times), 2),
        "optimizer_ms_p90_200x512": rounded(percentile(times, 90), 2),
        "target_optimizer_ms_200x512": TARGET_MS,
        "loops_ms_200x512": rounded(loops_ms, 1),
        "speedup_vs_loops": rounded(loops_ms / median(times), 1),
        "same_optimum": math.isclose(plan.value, expected, rel_tol=1e-9),
        "value": rounded(plan.value, 3),
        "gpus_used": plan.gpus,
        "jobs_running_after": sum(1 for choice in plan.choices.values() if choice is not None),
        "machine_cores": os.cpu_count(),
        "load_average_before": rounded(os.getloadavg()[0], 2),
    }
    print(
        f"[elastic_optimizer] {JOBS} jobs on {GPUS} GPUs: median "
        f"{figures['optimizer_ms_200x512']} ms, plain loops {figures['loops_ms_200x512']} ms, "
        f"same optimum {figures['same_optimum']}",
        flush=True,
    )
    print(json.dumps(figures), flush=True)


if __name__ == "__main__":
    main()
