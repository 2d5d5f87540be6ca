"""The local backend's one node: its capacity as the settings describe it, and what a learner
is given when it asks for GPUs the node only pretends to have.

`DLAAS_LOCAL_GPUS` makes the node offer GPUs so that GPU jobs (and scheduling them) can be
tried on a machine without any: such a learner runs on CPU, with `DLAAS_PRETEND_GPUS` set
to what it asked and `CUDA_VISIBLE_DEVICES` empty, and its log says so.
"""

from __future__ import annotations

from storage.cluster_nodes import PRETEND_GPUS_ENV, NodeCapacity
from storage.settings import Settings

LOCAL_NODE = "local"


def local_node(settings: Settings) -> NodeCapacity:
    gpus = settings.local_gpus
    return NodeCapacity(
        name=LOCAL_NODE,
        gpus=gpus,
        gpu_product=settings.local_gpu_product if gpus else None,
        millicpus=round(settings.local_cpus * 1000),
        memory=settings.local_memory,
        pretend_gpus=gpus > 0,
    )


def pretend_gpu_env(node: NodeCapacity, gpus: int) -> dict[str, str]:
    """What a learner asking for `gpus` GPUs is given on `node`: nothing on a node whose GPUs
    are real (or that has none); else the count it asked and no CUDA device, so that a
    program runs on CPU."""
    if not (node.pretend_gpus and gpus > 0):
        return {}
    return {PRETEND_GPUS_ENV: str(gpus), "CUDA_VISIBLE_DEVICES": ""}
