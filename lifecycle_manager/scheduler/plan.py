"""A job's plan: for candidate learner counts and batch sizes, what the performance model
expects (step time, throughput, time to finish, scaling efficiency), and which to pick.

The recommendation is the candidate with the fewest learners whose time to finish is within
`WITHIN` of the fastest one's (fewer learners at a larger batch when that ties): past that
point more GPUs buy little time, and they are GPUs other jobs could use.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace

from lifecycle_manager.scheduler.performance_model import (
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
    time_to_finish_s: float
    scaling_efficiency: float
    recommended: bool = False


def plan(
    costs: ModelCosts,
    network: Network,
    exchange: Exchange,
    shapes: Iterable[tuple[int, int]],
    samples: float,
) -> list[Candidate]:
    """Every (learners, global batch) of `shapes` that gives each learner at least one
    sample, by learners then batch, the recommended one marked."""
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
                samples / throughput,
                scaling_efficiency(costs, network, learners, global_batch, exchange),
            )
        )
    if not found:
        return []
    fastest = min(c.time_to_finish_s for c in found)
    pick = min(
        (c for c in found if c.time_to_finish_s <= fastest * (1 + WITHIN)),
        key=lambda c: (c.learners, -c.global_batch),
    )
    return [replace(c, recommended=True) if c is pick else c for c in found]
