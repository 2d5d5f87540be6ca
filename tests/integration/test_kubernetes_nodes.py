"""The kubernetes backend's nodes, and learners placed on one, against kmock's API emulator
with the real client."""

from __future__ import annotations

import secrets
from typing import Any

import pytest

from lifecycle_manager.backends.base import LearnerSpec, NoCapacity, Resources
from lifecycle_manager.backends.kubernetes.node_capacity import UNLABELED_GPU_PRODUCT
from lifecycle_manager.glue.context import Context
from storage.cluster_nodes import NodeCapacity
from tests.integration import kube_harness
from tests.integration.kube_harness import core_api, node, pods_of
from tests.integration.test_lifecycle_harness import eventually
from tests.kube.emulator import RunningEmulator
from tests.kube.kubelet import Kubelet

emulator = kube_harness.emulator
namespace = kube_harness.namespace
kube_ctx = kube_harness.kube_ctx

A100 = {"cpu": "3500m", "memory": "16Gi", "nvidia.com/gpu": "4", "pods": "110"}


def labelled(name: str, allocatable: dict[str, str], **labels: str) -> dict[str, Any]:
    body = node(name, allocatable)
    body["metadata"]["labels"].update(labels)
    return body


def not_ready(name: str) -> dict[str, Any]:
    body = node(name, {"cpu": "64", "memory": "256Gi"})
    body["status"]["conditions"] = [{"type": "Ready", "status": "False"}]
    return body


async def test_the_nodes_are_the_schedulable_ready_ones_with_their_gpus(
    kube_ctx: Context, emulator: RunningEmulator
) -> None:
    core = core_api(emulator.url)
    core.create_node(labelled("gpu-a", A100, **{"nvidia.com/gpu.product": "NVIDIA-A100"}))
    core.create_node(node("cpu-a", {"cpu": "4", "memory": "1000M"}))
    core.create_node(node("cordoned", {"cpu": "64", "memory": "256Gi"}, unschedulable=True))
    core.create_node(not_ready("down"))
    nodes = {each.name: each for each in await kube_ctx.backend.nodes()}
    assert sorted(nodes) == ["cpu-a", "gpu-a", "node-1"]
    assert nodes["gpu-a"] == NodeCapacity(
        name="gpu-a", gpus=4, gpu_product="NVIDIA-A100", millicpus=3500, memory=16 * 2**30
    )
    assert nodes["cpu-a"] == NodeCapacity(name="cpu-a", millicpus=4000, memory=10**9)
    # node-1 offers 8 GPUs but has no product label: quotas count them as product "gpu".
    assert (nodes["node-1"].gpus, nodes["node-1"].gpu_product) == (8, UNLABELED_GPU_PRODUCT)

    core.patch_node("gpu-a", {"spec": {"unschedulable": True}})  # cordoned meanwhile
    assert "gpu-a" not in {each.name for each in await kube_ctx.backend.nodes()}


def learner(job_id: str, placed_on: str | None) -> LearnerSpec:
    return LearnerSpec(
        job_id=job_id,
        learner=1,
        attempt=1,
        num_learners=1,
        command=["dlaas-learner", "--job", job_id, "--", "python train.py"],
        env={"TRAINING_ID": job_id},
        resources=Resources(cpus=1, memory_bytes=2**30, gpus=1),
        node=placed_on,
    )


async def test_a_learner_placed_on_a_node_runs_there_and_nowhere_else(
    kube_ctx: Context, emulator: RunningEmulator, namespace: str
) -> None:
    core_api(emulator.url).create_node(node("node-2", A100))
    job_id = f"training-{secrets.token_hex(5)}"
    with (
        Kubelet(emulator.url, namespace, node="node-1") as first,
        Kubelet(emulator.url, namespace, node="node-2") as second,
    ):
        assert await kube_ctx.backend.create_learners([learner(job_id, "node-2")]) != []

        async def running() -> bool:
            pods = pods_of(emulator, namespace, job_id)
            return bool(pods) and (pods[0].get("status") or {}).get("phase") == "Running"

        await eventually(running, what="the placed learner's pod running")
        [pod] = pods_of(emulator, namespace, job_id)
        assert pod["spec"]["nodeSelector"] == {"kubernetes.io/hostname": "node-2"}
        assert pod["spec"]["nodeName"] == "node-2"
        assert pod["metadata"]["name"] in second.seen and not first.seen


async def test_a_learner_placed_on_a_full_node_waits_though_another_has_room(
    kube_ctx: Context, emulator: RunningEmulator
) -> None:
    """Gang admission counts only the node the learner is placed on."""
    core_api(emulator.url).create_node(node("small", {"cpu": "8", "memory": "8Gi"}))
    job_id = f"training-{secrets.token_hex(5)}"
    with pytest.raises(NoCapacity, match="1 eligible node has 0 GPUs"):
        await kube_ctx.backend.create_learners([learner(job_id, "small")])
    assert await kube_ctx.backend.create_learners([learner(job_id, "node-1")])
