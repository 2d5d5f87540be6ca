"""A job's plan: for candidate learner counts and batch sizes, what the performance model
expects (step time, throughput, time to finish, scaling efficiency), and which to pick.

The recommendation is the candidate with the fewest learners whose time to finish is within
`WITHIN` of the fastest one's (fewer learners at a larger batch when that ties): past that
point more GPUs buy little time, and they are GPUs other jobs could use. Time to finish is
the samples over the throughput, so without a count of samples the same choice is made on
the throughput alone (within `WITHIN` of the highest).

It lives beside the stored job because both sides read it: the API answers `POST /v2/plan`
with it, and the lifecycle manager's autoscaler sizes elastic jobs by the same figures.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace

from storage.performance_model import (
    Exchange,
    ModelCosts,
    Network,
    scaling_efficiency,
    step_s,
)

WITHIN = 0.10


@dataclass(frozen=True, slots=True)
class Candidate:
    learners: int
    global_batch: int
    step_s: float
    throughput: float  # samples a second
    time_to_finish_s: float | None  # None: the job's samples are not known
    scaling_efficiency: float
    recommended: bool = False


def elastic_batch(
    learners: int, min_batch: int | None, max_batch: int | None, max_learner_batch: int | None
) -> int | None:
    """The global batch `learners` learners run an elastic job at: the largest of its range
    they hold that splits whole among them (a larger batch takes fewer steps, and fewer of
    each step's fixed costs, for the same samples; an uneven split keeps the others waiting
    for the learner with one sample more). None when no batch of the range gives each of
    them the same 1 to `max_learner_batch` samples, or when the job has no batch range."""
    if min_batch is None or max_batch is None:
        return None
    most = max_batch if max_learner_batch is None else min(max_batch, learners * max_learner_batch)
    most -= most % learners
    return most if most >= max(min_batch, learners) else None


def plan(
    costs: ModelCosts,
    network: Network,
    exchange: Exchange,
    shapes: Iterable[tuple[int, int]],
    samples: float | None,
) -> list[Candidate]:
    """Every (learners, global batch) of `shapes` that gives each learner at least one
    sample, by learners then batch, the recommended one marked. Without `samples` no time
    to finish is predicted, and the recommendation goes by throughput."""
    found = []
    for learners, global_batch in sorted(set(shapes)):
        if learners < 1 or global_batch < learners:
            continue
        step = step_s(costs, network, learners, global_batch, exchange)
        throughput = global_batch / step
        found.append(
            Candidate(
                learners,
                global_batch,
                step,
                throughput,
                None if samples is None else samples / throughput,
                scaling_efficiency(costs, network, learners, global_batch, exchange),
            )
        )
    if not found:
        return []
    # seconds a sample: the time to finish over the samples, whatever their number
    fastest = min(1 / c.throughput for c in found)
    pick = min(
        (c for c in found if 1 / c.throughput <= fastest * (1 + WITHIN)),
        key=lambda c: (c.learners, -c.global_batch),
    )
    return [replace(c, recommended=True) if c is pick else c for c in found]
