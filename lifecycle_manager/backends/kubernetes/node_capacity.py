"""The cluster's nodes as the scheduler sees them: each schedulable, ready node with its
allocatable CPU, memory and GPUs (`nvidia.com/gpu`), and its GPUs' product from the label
NVIDIA's GPU feature discovery sets. Pure.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from lifecycle_manager.backends.kubernetes.admission import allocatable, schedulable
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


def cluster_nodes(nodes: Iterable[Mapping[str, Any]]) -> list[NodeCapacity]:
    """The nodes new learners may go to: cordoned and NotReady ones are left out."""
    return [node_capacity(node) for node in nodes if schedulable(node)]
