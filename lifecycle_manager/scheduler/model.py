"""What the scheduler reads: a snapshot of nodes, teams, running and pending jobs.

Plain frozen values, filled by whoever calls the scheduler (the service from its
database and the cluster, the tests by hand, the simulator from its trace). Amounts are
integers: CPUs in millicpus, memory in bytes, GPUs by product name ("A100", "T4").
Times are seconds on one clock the caller chooses; the scheduler never reads a clock.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

GIB = 1 << 30


@dataclass(frozen=True, slots=True)
class Node:
    """A machine learners run on; its GPUs, if any, are all of one product."""

    name: str
    gpus: int = 0
    gpu_product: str | None = None
    millicpus: int = 0
    memory: int = 0


class Gang(NamedTuple):
    """What a job asks for: `learners` identical learners, each with these resources.

    `gpu_product` None means any product; all learners of a job then share one.
    A tuple, so that the many dictionary lookups a pass makes by gang hash and compare
    in C: as a dataclass, that was a tenth of a pass over 10,000 jobs.
    """

    learners: int = 1
    gpus: int = 0
    gpu_product: str | None = None
    millicpus: int = 1000
    memory: int = GIB


@dataclass(frozen=True, slots=True)
class Quota:
    """Amounts per resource; None means the resource is not limited.

    A GPU product missing from `gpus` counts as 0 of it.
    """

    gpus: Mapping[str, int] = field(default_factory=dict)
    millicpus: int | None = None
    memory: int | None = None
    jobs: int | None = None


@dataclass(frozen=True, slots=True)
class Team:
    """A team's guaranteed share (`nominal`), how far beyond it the team may borrow other
    teams' idle quota (`borrowing_limit`), its weight in fair sharing, and the highest
    priority its jobs may take."""

    name: str
    nominal: Quota
    borrowing_limit: Quota = field(default_factory=Quota)
    weight: float = 1.0
    max_priority: int = 0


@dataclass(frozen=True, slots=True)
class PendingJob:
    """A queued job. `estimated_runtime_s` (from `max_runtime` or the team's history) lets
    the job backfill ahead of the reservation; None means it never counts as short."""

    id: str
    team: str
    gang: Gang
    submitted_at: float
    priority: int = 0
    estimated_runtime_s: float | None = None


@dataclass(frozen=True, slots=True)
class RunningJob:
    """A job holding resources: `nodes` names each learner's node (learner 1 first), and
    `gpu_product` is the product it was placed on. `stopping` marks a job already asked
    to checkpoint and stop (a preemption victim): its resources free up soon, and it is
    never chosen again. `last_checkpoint_at` None means it has no checkpoint yet, so all
    its work since `started_at` would be lost."""

    id: str
    team: str
    gang: Gang
    nodes: tuple[str, ...]
    started_at: float
    priority: int = 0
    gpu_product: str | None = None
    estimated_runtime_s: float | None = None
    last_checkpoint_at: float | None = None
    stopping: bool = False

    def estimated_end(self) -> float | None:
        if self.estimated_runtime_s is None:
            return None
        return self.started_at + self.estimated_runtime_s


@dataclass(frozen=True, slots=True)
class ClusterSnapshot:
    nodes: tuple[Node, ...]
    teams: tuple[Team, ...]
    running: tuple[RunningJob, ...] = ()
    pending: tuple[PendingJob, ...] = ()
