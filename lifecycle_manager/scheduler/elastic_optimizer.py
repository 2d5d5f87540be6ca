"""How many learners, and which global batch, each elastic job should run with.

Saxena et al. (arXiv 2006.13878): a job may run with any learner count and global batch
in its ranges; each choice has a value (here the job's speedup: its throughput over its
throughput at its smallest choice), and the GPUs go where the values add up to most. That
is a knapsack with one choice per job, solved exactly by dynamic programming over the jobs
and the GPUs: best[c] after job j is the most value jobs 1..j can make of at most c GPUs,

    best_j[c] = max(best_{j-1}[c]                      (job j waits; not for running jobs)
                    max over choices o of job j with gpus_o <= c:
                        best_{j-1}[c - gpus_o] + value_o)

and the choices are read back from the last job to the first. Each job's step is one
vectorised operation over its choices and every capacity, so 200 jobs on 512 GPUs take
milliseconds (`bench/elastic_optimizer.py`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view


class Choice(NamedTuple):
    """One way to run a job: learners, the global batch, and the samples a second expected."""

    learners: int
    global_batch: int
    throughput: float


@dataclass(frozen=True, slots=True)
class ElasticJob:
    """A job the optimizer may size. `choices` hold at most one per learner count (the
    best batch for it). A running job keeps one of its choices; a waiting one may get none."""

    id: str
    gpus_per_learner: int
    choices: tuple[Choice, ...]
    running: bool = False

    def gpus(self, choice: Choice) -> int:
        return choice.learners * max(self.gpus_per_learner, 1)


@dataclass(frozen=True, slots=True)
class Plan:
    """The choice per job id (None: it waits), the GPUs they take and their total value."""

    choices: dict[str, Choice | None]
    gpus: int
    value: float


def speedup(job: ElasticJob, choice: Choice) -> float:
    """The value of a choice: its throughput over the job's smallest choice's."""
    return _speedups(job, (choice,))[0]


def _speedups(job: ElasticJob, choices: Sequence[Choice]) -> list[float]:
    base = min(job.choices, key=lambda c: c.learners).throughput
    return [c.throughput / base if base > 0 else 0.0 for c in choices]


def optimize(jobs: Sequence[ElasticJob], gpus: int) -> Plan | None:
    """The choices of most total speedup within `gpus`; None when the running jobs'
    smallest choices alone do not fit."""
    capacities = np.arange(gpus + 1)
    best = np.zeros(gpus + 1)
    picks: list[np.ndarray] = []
    for job in jobs:
        if not job.choices:
            if job.running:
                return None
            picks.append(np.full(gpus + 1, -1))
            continue
        sizes = np.array([job.gpus(c) for c in job.choices], dtype=np.int64)
        values = np.array(_speedups(job, job.choices))
        # row o, column c: best[c - size_o] (-inf where the choice does not fit), each row
        # a window of best shifted right by the choice's size
        pad = int(sizes.max())
        shifted = np.concatenate((np.full(pad, -np.inf), best))
        candidates = sliding_window_view(shifted, gpus + 1)[pad - sizes] + values[:, None]
        pick = candidates.argmax(axis=0)
        chosen = candidates[pick, capacities]
        if not job.running:
            waits = best >= chosen
            pick = np.where(waits, -1, pick)
            chosen = np.where(waits, best, chosen)
        picks.append(pick)
        best = chosen
    if not np.isfinite(best[gpus]):
        return None
    choices: dict[str, Choice | None] = {}
    left = gpus
    for job, pick in zip(reversed(jobs), reversed(picks), strict=True):
        index = int(pick[left])
        if index < 0:
            choices[job.id] = None
            continue
        choice = job.choices[index]
        choices[job.id] = choice
        left -= job.gpus(choice)
    return Plan({job.id: choices[job.id] for job in jobs}, gpus - left, float(best[gpus]))
