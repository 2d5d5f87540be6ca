"""What a cluster backend offers the lifecycle manager: its nodes; create, delete and list learners.

A learner is one process (local backend) or one pod (Kubernetes) running the learner
runner for one attempt of one job. Its name is deterministic, so creating it twice is the
same as creating it once: a backend treats "already exists" as success.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Protocol

from storage.cluster_nodes import NodeCapacity

# A field of a learner's `exit` event, set by backends whose cluster says whether it killed
# the learner for memory (Kubernetes' `OOMKilled`): "1" or "0"; absent where it cannot say.
OOM_KILLED_FIELD = "oom_killed"


def learner_name(job_id: str, learner: int, attempt: int) -> str:
    return f"dlaas-{job_id}-learner-{learner}-a{attempt}"


class LearnerPhase(StrEnum):
    PENDING = "Pending"
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"


@dataclass(frozen=True)
class Resources:
    cpus: float | None = None
    memory_bytes: int | None = None
    gpus: int = 0


@dataclass(frozen=True)
class LearnerSpec:
    job_id: str
    learner: int  # 1-based
    attempt: int
    num_learners: int
    command: list[str]
    # Everything the learner needs that does not depend on where it runs; the backend adds
    # the placement-specific part (directories, MASTER_ADDR, MASTER_PORT).
    env: dict[str, str] = field(default_factory=dict)
    # The user's environment (the manifest's `environment`): the backend hands it to the
    # runner for the user's program alone, never to a process of the platform.
    program_env: dict[str, str] = field(default_factory=dict)
    resources: Resources = field(default_factory=Resources)
    # The node the learner must run on (a scheduler's placement); None: wherever the
    # cluster puts it. The local backend has one node and ignores it.
    node: str | None = None

    @property
    def name(self) -> str:
        return learner_name(self.job_id, self.learner, self.attempt)


@dataclass(frozen=True)
class LearnerStatus:
    job_id: str
    learner: int
    attempt: int
    name: str
    phase: LearnerPhase
    exit_code: int | None = None
    signal: str | None = None
    reason: str = ""
    stopping: bool = False  # being deleted
    oom_killed: bool | None = None  # the cluster says it was killed for memory (None: unknown)
    # From the runner's exit report, where the cluster keeps it: the runner was told to stop
    # (the program did not end by itself), and the program's last line.
    told_to_stop: bool = False
    last_line: str = ""

    @property
    def finished(self) -> bool:
        return self.phase in (LearnerPhase.SUCCEEDED, LearnerPhase.FAILED)


class BackendUnavailable(Exception):
    """The backend could not be reached or refused for a passing reason; retry later."""


class NoCapacity(BackendUnavailable):
    """The cluster cannot hold the whole gang now; nothing was created. The message says
    what is short (gang admission), and a later try may succeed."""


class ClusterBackend(Protocol):
    async def nodes(self) -> list[NodeCapacity]:
        """The nodes learners may run on now, each with its whole capacity (not what is free):
        Kubernetes' schedulable, ready nodes with their allocatable CPU, memory and GPUs;
        the local backend's one node as its settings describe it. Creates nothing."""
        ...

    async def create_learners(self, specs: Sequence[LearnerSpec]) -> list[str]:
        """Create every learner of a gang; returns the names that did not exist before."""
        ...

    async def delete_learners(
        self,
        job_id: str,
        *,
        wait: float = 0.0,
        grace: float | None = None,
        up_to_attempt: int | None = None,
    ) -> bool:
        """Stop and remove the learners of a job (SIGTERM, then SIGKILL after a grace).

        With `up_to_attempt`, only those of that attempt or an older one: an operation that
        decided on an attempt leaves a newer one, deployed meanwhile, alone. Without it, the
        job is done with, and what was made for it (a Secret, a Service) goes too.
        With `wait`, block up to that many seconds for them to be gone; returns whether
        none of those learners is left. `grace` overrides the backend's default time
        between SIGTERM and SIGKILL (a restart cuts it short: the gang is broken anyway).
        """
        ...

    async def delete_learner(self, name: str) -> None:
        """Stop and remove one learner (for example one left from an older attempt)."""
        ...

    async def delete_learner_of(
        self,
        job_id: str,
        learner: int,
        *,
        wait: float = 0.0,
        grace: float | None = None,
        up_to_attempt: int | None = None,
    ) -> bool:
        """Stop and remove learner `learner` (1-based) of a job, of every attempt (up to
        `up_to_attempt`), and leave the others running (a restart of that learner alone).
        `wait`, `grace` and `up_to_attempt` as for `delete_learners`; returns whether none
        of those is left."""
        ...

    async def list_learners(self) -> list[LearnerStatus]: ...

    async def aclose(self) -> None: ...
