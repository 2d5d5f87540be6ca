"""The scheduler's view of the platform, built from plain records of the database and
the cluster: what `scheduling_pass.run_pass` hands to `scheduler.schedule`.

Pure functions over plain data, so tests build snapshots as the service does.

A team whose quota was never set may use the whole cluster (each resource unlimited):
quotas only divide a cluster once a platform admin sets them. A job admitted before the
scheduler recorded placements is counted on the first node.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from lifecycle_manager.scheduler import (
    ClusterSnapshot,
    Gang,
    Node,
    PendingJob,
    Quota,
    RunningJob,
    Team,
)
from storage.cluster_nodes import NodeCapacity
from storage.team_quotas import TeamQuota


@dataclass(frozen=True)
class Placement:
    """Where an admission put a job's learners (learner i on `nodes[i - 1]`)."""

    nodes: tuple[str, ...]
    gpu_product: str | None = None
    borrowed: bool = False


@dataclass(frozen=True)
class JobRecord:
    """A job the scheduler weighs: waiting (`holding` False) or holding resources."""

    id: str
    team: str
    manifest: Mapping[str, Any]
    submitted_at: float
    holding: bool
    attempt: int = 0
    placement: Placement | None = None
    admitted_at: float | None = None
    last_checkpoint_at: float | None = None
    preempting: bool = False


def gang_of(manifest: Mapping[str, Any]) -> Gang:
    return Gang(
        learners=int(manifest.get("learners", 1)),
        gpus=int(manifest.get("gpus", 0)),
        millicpus=round(float(manifest.get("cpus", 1.0)) * 1000),
        memory=int(manifest.get("memory", 1000**3)),
    )


def priority_of(manifest: Mapping[str, Any]) -> int:
    return int(manifest.get("priority") or 0)


def estimated_runtime_of(manifest: Mapping[str, Any]) -> float | None:
    runtime = manifest.get("max_runtime")
    return float(runtime) if runtime else None


def node_of(capacity: NodeCapacity) -> Node:
    return Node(
        name=capacity.name,
        gpus=capacity.gpus,
        gpu_product=capacity.gpu_product if capacity.gpus else None,
        millicpus=capacity.millicpus,
        memory=capacity.memory,
    )


# GPUs "not limited": the scheduler's quotas count GPUs per product, a product left out as 0
NOT_LIMITED_GPUS = 1 << 40


def _gpus(amounts: Mapping[str, int] | None, products: Iterable[str]) -> Mapping[str, int]:
    return dict.fromkeys(products, NOT_LIMITED_GPUS) if amounts is None else dict(amounts)


def team_of(quota: TeamQuota, products: Iterable[str]) -> Team:
    """A team's quota as the scheduler reads it, for the cluster's GPU products."""
    nominal = Quota(
        gpus=_gpus(quota.gpus, products),
        millicpus=quota.millicpus,
        memory=quota.memory,
        jobs=quota.jobs,
    )
    borrowing = Quota(
        gpus=_gpus(quota.borrow_gpus, products),
        millicpus=quota.borrow_millicpus,
        memory=quota.borrow_memory,
        jobs=quota.borrow_jobs,
    )
    return Team(
        name=quota.team,
        nominal=nominal,
        borrowing_limit=borrowing,
        weight=quota.weight,
        max_priority=quota.max_priority,
    )


def running_of(job: JobRecord, first_node: str) -> RunningJob:
    gang = gang_of(job.manifest)
    placement = job.placement or Placement(nodes=(first_node,) * gang.learners)
    # an elastic job runs with as many learners as its newest placement put (a resize
    # places it again), not necessarily as many as its manifest starts it with
    gang = gang._replace(learners=len(placement.nodes))
    return RunningJob(
        id=job.id,
        team=job.team,
        gang=gang,
        nodes=placement.nodes,
        started_at=job.admitted_at if job.admitted_at is not None else job.submitted_at,
        priority=priority_of(job.manifest),
        gpu_product=placement.gpu_product,
        estimated_runtime_s=estimated_runtime_of(job.manifest),
        last_checkpoint_at=job.last_checkpoint_at,
        stopping=job.preempting,
    )


def pending_of(job: JobRecord) -> PendingJob:
    return PendingJob(
        id=job.id,
        team=job.team,
        gang=gang_of(job.manifest),
        submitted_at=job.submitted_at,
        priority=priority_of(job.manifest),
        estimated_runtime_s=estimated_runtime_of(job.manifest),
    )


def snapshot(
    capacities: Sequence[NodeCapacity],
    quotas: Iterable[TeamQuota],
    jobs: Iterable[JobRecord],
) -> ClusterSnapshot:
    nodes = tuple(node_of(c) for c in capacities)
    products = sorted({n.gpu_product for n in nodes if n.gpu_product is not None})
    first_node = nodes[0].name if nodes else ""
    running, pending = [], []
    for job in jobs:
        if job.holding:
            running.append(running_of(job, first_node))
        else:
            pending.append(pending_of(job))
    return ClusterSnapshot(
        nodes=nodes,
        teams=tuple(team_of(q, products) for q in quotas),
        running=tuple(running),
        pending=tuple(sorted(pending, key=lambda j: (j.submitted_at, j.id))),
    )
