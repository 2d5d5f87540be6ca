"""The cluster's nodes as the scheduler sees them: each schedulable, ready node with its
allocatable CPU, memory and GPUs (`nvidia.com/gpu`), and its GPUs' product from the label
NVIDIA's GPU feature discovery sets. Pure.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

from lifecycle_manager.backends.kubernetes.admission import (
    FINISHED_PHASES,
    Amount,
    allocatable,
    pod_request,
    schedulable,
)
from storage.cluster_nodes import NodeCapacity

GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
# The product of a node's GPUs when no label names it: quotas count these GPUs under it.
UNLABELED_GPU_PRODUCT = "gpu"


def node_capacity(node: Mapping[str, Any]) -> NodeCapacity:
    meta = node.get("metadata") or {}
    labels = meta.get("labels") or {}
    amount = allocatable(node)
    return NodeCapacity(
        name=str(meta.get("name", "")),
        gpus=amount.gpus,
        gpu_product=(labels.get(GPU_PRODUCT_LABEL) or UNLABELED_GPU_PRODUCT)
        if amount.gpus
        else None,
        millicpus=amount.millicpu,
        memory=amount.memory,
    )


def held_by(pods: Iterable[Mapping[str, Any]]) -> dict[str, Amount]:
    """What the running or starting pods request, by the node they are bound to."""
    held: dict[str, Amount] = {}
    for pod in pods:
        if (pod.get("status") or {}).get("phase") in FINISHED_PHASES:
            continue
        name = (pod.get("spec") or {}).get("nodeName")
        if name:
            held[name] = held.get(name, Amount()) + pod_request(pod)
    return held


def cluster_nodes(
    nodes: Iterable[Mapping[str, Any]], other_pods: Iterable[Mapping[str, Any]] = ()
) -> list[NodeCapacity]:
    """The nodes new learners may go to (cordoned and NotReady ones are left out), each
    less what `other_pods`, the cluster's other workloads, hold on it: dlaas schedules
    within what they leave."""
    held = held_by(other_pods)
    found = []
    for node in nodes:
        if not schedulable(node):
            continue
        capacity = node_capacity(node)
        taken = held.get(capacity.name)
        if taken is not None:
            capacity = dataclasses.replace(
                capacity,
                gpus=max(0, capacity.gpus - taken.gpus),
                millicpus=max(0, capacity.millicpus - taken.millicpu),
                memory=max(0, capacity.memory - taken.memory),
            )
        found.append(capacity)
    return found
