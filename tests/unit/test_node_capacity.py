"""What each backend says its nodes hold: Kubernetes nodes from their allocatable quantities
and labels, the local node from the `DLAAS_LOCAL_*` settings."""

from __future__ import annotations

import os
from typing import Any

import pytest

from learner_image.runner_config import parse_config
from learner_image.shipping import pretend_gpus_note
from lifecycle_manager.backends.kubernetes.node_capacity import cluster_nodes, node_capacity
from lifecycle_manager.backends.local.capacity import local_node, pretend_gpu_env
from storage.cluster_nodes import NodeCapacity
from storage.memory_sizes import machine_memory
from storage.settings import Settings


def kube_node(
    name: str,
    allocatable: dict[str, str],
    labels: dict[str, str] | None = None,
    ready: str | None = "True",
    **spec: Any,
) -> dict[str, Any]:
    conditions = [] if ready is None else [{"type": "Ready", "status": ready}]
    return {
        "metadata": {"name": name, "labels": labels or {}},
        "spec": spec,
        "status": {"allocatable": allocatable, "conditions": conditions},
    }


@pytest.mark.parametrize(
    ("cpu", "millicpus"), [("3500m", 3500), ("4", 4000), ("0.5", 500), ("250m", 250)]
)
def test_cpu_quantities_become_millicpus(cpu: str, millicpus: int) -> None:
    assert node_capacity(kube_node("a", {"cpu": cpu})).millicpus == millicpus


@pytest.mark.parametrize(
    ("memory", "size"),
    [("16Gi", 16 * 2**30), ("1000M", 10**9), ("512Ki", 512 * 1024), ("123456", 123456)],
)
def test_memory_quantities_become_bytes(memory: str, size: int) -> None:
    assert node_capacity(kube_node("a", {"memory": memory})).memory == size


def test_a_nodes_gpus_and_their_product_come_from_its_allocatable_and_label() -> None:
    labels = {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}
    allocatable = {"cpu": "96", "memory": "1Ti", "nvidia.com/gpu": "8", "pods": "110"}
    assert node_capacity(kube_node("gpu-1", allocatable, labels)) == NodeCapacity(
        name="gpu-1",
        gpus=8,
        gpu_product="NVIDIA-A100-SXM4-80GB",
        millicpus=96_000,
        memory=2**40,
    )
    # A product label on a node offering no GPU names nothing it has.
    assert node_capacity(kube_node("cpu-1", {"cpu": "4"}, labels)).gpu_product is None


def test_cordoned_and_not_ready_nodes_are_left_out() -> None:
    nodes = [
        kube_node("ready", {"cpu": "4"}),
        kube_node("silent", {"cpu": "4"}, ready=None),  # no Ready condition: as the admission
        kube_node("cordoned", {"cpu": "4"}, unschedulable=True),
        kube_node("not-ready", {"cpu": "4"}, ready="False"),
        kube_node("unknown", {"cpu": "4"}, ready="Unknown"),
    ]
    assert [node.name for node in cluster_nodes(nodes)] == ["ready", "silent"]


def test_what_other_workloads_hold_on_a_node_is_not_offered() -> None:
    def pod(node: str, phase: str, **requests: str) -> dict[str, Any]:
        container = {"name": "main", "resources": {"requests": requests}}
        return {"spec": {"nodeName": node, "containers": [container]}, "status": {"phase": phase}}

    allocatable = {"cpu": "8", "memory": "32Gi", "nvidia.com/gpu": "4"}
    others = [
        pod("gpu-1", "Running", cpu="2", memory="8Gi", **{"nvidia.com/gpu": "1"}),
        pod("gpu-1", "Pending", cpu="500m"),
        pod("gpu-1", "Succeeded", cpu="4", **{"nvidia.com/gpu": "3"}),  # done: holds nothing
        pod("elsewhere", "Running", cpu="64"),
    ]
    [node] = cluster_nodes([kube_node("gpu-1", allocatable)], others)
    assert (node.gpus, node.millicpus, node.memory) == (3, 5500, 24 * 2**30)


def test_the_local_node_is_what_the_settings_say(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DLAAS_LOCAL_GPUS", "4")
    monkeypatch.setenv("DLAAS_LOCAL_GPU_PRODUCT", "pretend-A100")
    monkeypatch.setenv("DLAAS_LOCAL_CPUS", "2.5")
    monkeypatch.setenv("DLAAS_LOCAL_MEMORY", "16GiB")
    assert local_node(Settings()) == NodeCapacity(
        name="local",
        gpus=4,
        gpu_product="pretend-A100",
        millicpus=2500,
        memory=16 * 2**30,
        pretend_gpus=True,
    )


def test_by_default_the_local_node_is_this_machine_without_gpus(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in ("GPUS", "GPU_PRODUCT", "CPUS", "MEMORY"):
        monkeypatch.delenv(f"DLAAS_LOCAL_{name}", raising=False)
    node = local_node(Settings())
    assert node == NodeCapacity(
        name="local",
        millicpus=(os.cpu_count() or 1) * 1000,
        memory=machine_memory(),
    )
    assert node.memory > 0


@pytest.mark.parametrize("memory", ["16 parsecs", "-1", "0"])
def test_a_local_memory_that_is_not_a_size_is_refused(
    monkeypatch: pytest.MonkeyPatch, memory: str
) -> None:
    monkeypatch.setenv("DLAAS_LOCAL_MEMORY", memory)
    with pytest.raises(ValueError, match="local_memory"):
        Settings()


def test_a_learner_asking_for_pretend_gpus_runs_on_cpu_and_is_told() -> None:
    pretend = NodeCapacity("local", gpus=4, gpu_product="pretend", pretend_gpus=True)
    assert pretend_gpu_env(pretend, 2) == {"DLAAS_PRETEND_GPUS": "2", "CUDA_VISIBLE_DEVICES": ""}
    assert pretend_gpu_env(pretend, 0) == {}
    assert pretend_gpu_env(NodeCapacity("gpu-1", gpus=8, gpu_product="A100"), 2) == {}
    argv = ["--job", "training-x", "--", "python train.py"]
    config = parse_config(argv, {"DLAAS_PRETEND_GPUS": "2"})
    assert config.pretend_gpus == 2
    assert parse_config(argv, {}).pretend_gpus == 0
    assert pretend_gpus_note(2) == (
        "the 2 GPUs per learner are pretend and the job runs on CPU: this node's GPUs are "
        "configured with DLAAS_LOCAL_GPUS"
    )
