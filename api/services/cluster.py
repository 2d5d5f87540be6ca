"""`GET /v2/cluster`: the cluster's nodes with their capacity, and what active learners hold.

The nodes are those the lifecycle manager last published (`storage.cluster_nodes`), each
with its GPUs' product and whether they are pretend; until it has published any, the local
backend's node is this machine as the API sees it (the Kubernetes backend's: none). What
learners hold is counted from their jobs' manifests; it is told per node only where there is
one node, and for the whole cluster always.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterable, Mapping, Sequence
from decimal import Decimal
from typing import Any

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from api.state import ApiState
from storage.cluster_nodes import NodeCapacity, anodes
from storage.job_states import ACTIVE_STATES, LearnerState
from storage.memory_sizes import machine_memory
from storage.models import Job, Learner

# The learners counted as holding their share of a node.
HOLDING = (LearnerState.PENDING, LearnerState.DOWNLOADING, LearnerState.RUNNING)


def _number(value: object) -> float:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0.0


def held(manifests: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """What the learners of these manifests (one per learner) hold together."""
    return {
        "learners": len(manifests),
        "cpus_used": round(sum(_number(m.get("cpus", 1)) for m in manifests), 3),
        "memory_bytes_used": int(sum(_number(m.get("memory")) for m in manifests)),
        "gpus_used": int(sum(_number(m.get("gpus")) for m in manifests)),
    }


def _this_machine() -> dict[str, Any]:
    return {
        "name": socket.gethostname(),
        "cpus": os.cpu_count() or 1,
        "memory_bytes": machine_memory(),
        "gpus": 0,
        "gpu_product": None,
        "pretend_gpus": False,
    }


def _published(node: NodeCapacity) -> dict[str, Any]:
    cpus = Decimal(node.millicpus) / 1000
    return {
        "name": node.name,
        "cpus": int(cpus) if cpus == int(cpus) else float(cpus),
        "memory_bytes": node.memory,
        "gpus": node.gpus,
        "gpu_product": node.gpu_product,
        "pretend_gpus": node.pretend_gpus,
    }


def gpus_by_product(nodes: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    """GPUs of the nodes by product ("unknown" for GPUs no label names)."""
    counts: dict[str, int] = {}
    for node in nodes:
        if node["gpus"]:
            product = node["gpu_product"] or "unknown"
            counts[product] = counts.get(product, 0) + node["gpus"]
    return counts


async def _holding_manifests(session: AsyncSession) -> list[dict[str, Any]]:
    """The manifest of each learner that holds its share of a node (one per learner)."""
    rows = await session.execute(
        select(Job.manifest)
        .select_from(Learner)
        .join(Job, Job.id == Learner.job_id)
        .where(
            Job.state.in_([s.value for s in ACTIVE_STATES]),
            Learner.state.in_([s.value for s in HOLDING]),
        )
    )
    return list(rows.scalars().all())


async def cluster_view(state: ApiState, session: AsyncSession) -> dict[str, Any]:
    manifests = await _holding_manifests(session)
    backend = state.settings.cluster_backend
    published = await anodes(state.redis)
    if published is not None:
        nodes = [_published(node) for node in published]
    else:
        nodes = [_this_machine()] if backend == "local" else []
    usage = held(manifests)
    unknown = dict.fromkeys(usage)  # which node holds what is not known
    for node in nodes:
        node.update(usage if len(nodes) == 1 else unknown)
    return {
        "backend": backend,
        "nodes": nodes,
        "active_learners": len(manifests),
        "published": published is not None,
        "gpus_by_product": gpus_by_product(nodes),
        "used": {key.removesuffix("_used"): value for key, value in usage.items()},
    }
