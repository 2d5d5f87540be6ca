"""The elastic optimizer against brute force: the same best total speedup on small clusters."""

from __future__ import annotations

import itertools
import random

import pytest

from lifecycle_manager.scheduler.elastic_optimizer import (
    Choice,
    ElasticJob,
    optimize,
    speedup,
)
from storage.performance_model import (
    Exchange,
    ModelCosts,
    Network,
    throughput,
)


def job_of(
    name: str,
    rng: random.Random,
    *,
    running: bool = False,
    gpus_per_learner: int = 1,
    max_learners: int = 4,
) -> ElasticJob:
    """A job whose throughput grows sub-linearly with learners, from the performance model
    with costs drawn at random; each learner count runs the largest batch it may."""
    costs = ModelCosts(
        sample_s=rng.uniform(0.001, 0.01),
        step_overhead_s=rng.uniform(0.005, 0.05),
        model_bytes=rng.choice([10, 100, 400]) << 20,
    )
    network = Network(bandwidth_bytes_s=rng.choice([1.25e9, 1.25e10]), latency_s=5e-5)
    least = rng.randint(1, 2)
    per_learner = rng.choice([32, 64])
    choices = tuple(
        Choice(
            n, n * per_learner, throughput(costs, network, n, n * per_learner, Exchange.ALL_REDUCE)
        )
        for n in range(least, rng.randint(least, max_learners) + 1)
    )
    return ElasticJob(name, gpus_per_learner, choices, running)


def brute_force(jobs: list[ElasticJob], gpus: int) -> float | None:
    best: float | None = None
    options = [([c for c in job.choices]) if job.running else [None, *job.choices] for job in jobs]
    for picked in itertools.product(*options):
        used = sum(job.gpus(c) for job, c in zip(jobs, picked, strict=True) if c is not None)
        if used > gpus:
            continue
        value = sum(speedup(job, c) for job, c in zip(jobs, picked, strict=True) if c is not None)
        if best is None or value > best:
            best = value
    return best


@pytest.mark.parametrize("seed", range(40))
def test_the_optimum_is_brute_forces(seed: int) -> None:
    rng = random.Random(seed)
    gpus = rng.randint(2, 12)
    jobs = [
        job_of(f"j{i}", rng, running=rng.random() < 0.4, gpus_per_learner=rng.choice([1, 1, 2]))
        for i in range(rng.randint(1, 5))
    ]
    expected = brute_force(jobs, gpus)
    plan = optimize(jobs, gpus)
    if expected is None:
        assert plan is None
        return
    assert plan is not None
    assert plan.value == pytest.approx(expected)
    # the plan is what it says: its choices fit, and add up to its value
    chosen = [(job, plan.choices[job.id]) for job in jobs]
    assert plan.gpus == sum(job.gpus(c) for job, c in chosen if c is not None) <= gpus
    assert plan.value == pytest.approx(sum(speedup(job, c) for job, c in chosen if c is not None))
    assert all(c is not None for job, c in chosen if job.running)


def test_a_running_job_keeps_a_choice_and_a_waiting_one_may_wait() -> None:
    rng = random.Random(3)
    running = job_of("running", rng, running=True, max_learners=2)
    waiting = job_of("waiting", rng, max_learners=2)
    least = min(running.gpus(c) for c in running.choices)
    plan = optimize([running, waiting], least)
    assert plan is not None
    assert plan.choices["running"] is not None
    assert plan.choices["waiting"] is None


def test_running_jobs_that_do_not_fit_have_no_plan() -> None:
    rng = random.Random(5)
    jobs = [job_of(f"r{i}", rng, running=True) for i in range(3)]
    least = sum(min(job.gpus(c) for c in job.choices) for job in jobs)
    assert optimize(jobs, least - 1) is None
    assert optimize(jobs, least) is not None


def test_spare_gpus_grow_the_job_that_gains_most() -> None:
    """Two running jobs at one learner and two spare GPUs: they go to the job whose
    throughput grows most with learners (little to exchange), not to the one that
    communicates much."""
    light = ElasticJob(
        "light", 1, (Choice(1, 32, 100.0), Choice(2, 64, 195.0), Choice(3, 96, 285.0)), True
    )
    heavy = ElasticJob(
        "heavy", 1, (Choice(1, 32, 100.0), Choice(2, 64, 120.0), Choice(3, 96, 130.0)), True
    )
    plan = optimize([light, heavy], 4)
    assert plan is not None
    assert plan.choices == {"light": light.choices[2], "heavy": heavy.choices[0]}
