"""`GET /v2/cluster` shows the nodes the lifecycle manager published, and a submission whose
learner no published node can hold is refused naming the manifest field."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from storage.cluster_nodes import NodeCapacity, apublish_nodes
from tests.integration.api_harness import Harness, running_api, submit

NODES = [
    NodeCapacity("gpu-a", 8, "A100", millicpus=96_000, memory=2**40),
    NodeCapacity("gpu-b", 4, "A100", millicpus=3_500, memory=64 * 2**30),
    NodeCapacity("cpu-a", 0, None, millicpus=4_000, memory=16 * 2**30),
]


@pytest.fixture
async def api(tmp_path: Path, private_redis_url: str) -> AsyncIterator[Harness]:
    """The API on a Redis database of its own: the published nodes are platform-wide."""
    database_url = f"sqlite+aiosqlite:///{tmp_path / 'api.db'}"
    async with running_api(database_url, private_redis_url, tmp_path / "objects") as harness:
        yield harness


@pytest.fixture
async def kube_api(tmp_path: Path, private_redis_url: str) -> AsyncIterator[Harness]:
    """The same, for a platform on Kubernetes."""
    database_url = f"sqlite+aiosqlite:///{tmp_path / 'api.db'}"
    async with running_api(
        database_url, private_redis_url, tmp_path / "objects", cluster_backend="kubernetes"
    ) as harness:
        yield harness


async def publish(api: Harness, nodes: list[NodeCapacity]) -> None:
    await apublish_nodes(api.app.state.dlaas.redis, nodes)


def manifest(**asks: object) -> bytes:
    lines = "".join(f"{key}: {value}\n" for key, value in asks.items())
    return f"name: big\nlearners: 2\n{lines}framework:\n  command: python train.py\n".encode()


async def test_the_cluster_shows_the_published_nodes_with_their_gpus(api: Harness) -> None:
    before = (await api.admin.get("/v2/cluster")).json()
    assert before["published"] is False
    [machine] = before["nodes"]  # nothing published yet: this machine, as before
    assert machine["gpus"] == 0 and machine["cpus"] >= 1 and machine["memory_bytes"] > 0
    assert machine["learners"] == before["active_learners"] == 0

    await publish(api, NODES)
    cluster = (await api.admin.get("/v2/cluster")).json()
    assert cluster["published"] is True and cluster["backend"] == "local"
    assert cluster["gpus_by_product"] == {"A100": 12}
    by_name = {node["name"]: node for node in cluster["nodes"]}
    assert list(by_name) == ["gpu-a", "gpu-b", "cpu-a"]
    assert by_name["gpu-b"] == {
        "name": "gpu-b",
        "cpus": 3.5,
        "memory_bytes": 64 * 2**30,
        "gpus": 4,
        "gpu_product": "A100",
        "pretend_gpus": False,
        # which of several nodes holds what is not known; the cluster's total is
        "learners": None,
        "cpus_used": None,
        "memory_bytes_used": None,
        "gpus_used": None,
    }
    assert cluster["used"] == {"learners": 0, "cpus": 0, "memory_bytes": 0, "gpus": 0}

    local = NodeCapacity("local", 2, "pretend", 6_000, 32 * 2**30, pretend_gpus=True)
    await publish(api, [local])
    cluster = (await api.admin.get("/v2/cluster")).json()
    [node] = cluster["nodes"]
    assert (node["name"], node["cpus"], node["gpus"], node["pretend_gpus"]) == (
        "local",
        6,
        2,
        True,
    )
    assert node["learners"] == 0  # one node: it holds every active learner
    assert cluster["gpus_by_product"] == {"pretend": 2}


@pytest.mark.parametrize(
    ("asks", "field", "detail"),
    [
        (
            {"gpus": 9},
            "gpus",
            "9 GPUs per learner is more than any node has: the largest node has 8 GPUs (A100); "
            "ask for at most 8 per learner",
        ),
        (
            {"gpus": 4, "cpus": 100},
            "cpus",
            "100 CPUs per learner is more than any node with 4 GPUs has: the largest node with "
            "4 GPUs has 96 CPUs; ask for at most 96 per learner",
        ),
        (
            {"cpus": 8, "memory": "2Ti"},
            "memory",
            "2048Gi of memory per learner is more than any node with 8 CPUs has: the largest "
            "node with 8 CPUs has 1024Gi of memory; ask for at most 1024Gi per learner",
        ),
    ],
)
async def test_a_learner_larger_than_every_node_is_refused_naming_the_field(
    kube_api: Harness, asks: dict[str, object], field: str, detail: str
) -> None:
    await publish(kube_api, NODES)
    refused = await submit(kube_api.admin, manifest(**asks))
    assert refused.status_code == 422, refused.text
    assert refused.json() == {"error": "larger_than_any_node", "detail": detail, "field": field}
    assert (await kube_api.admin.get("/v2/jobs")).json()["jobs"] == []


async def test_a_learner_that_fits_a_node_is_accepted(kube_api: Harness) -> None:
    await publish(kube_api, NODES)
    fits = await submit(kube_api.admin, gang(1, "gpus: 8\ncpus: 96\nmemory: 1Ti\n"))
    assert fits.status_code == 201, fits.text
    # Each learner fits a node of its own; two need not fit one.
    fits = await submit(kube_api.admin, manifest(gpus=4, cpus=3.5, memory="64Gi"))
    assert fits.status_code == 201, fits.text


async def test_nothing_is_refused_for_its_size_before_nodes_are_published(
    kube_api: Harness,
) -> None:
    accepted = await submit(kube_api.admin, manifest(gpus=64, cpus=1024))
    assert accepted.status_code == 201, accepted.text


async def test_the_local_nodes_missing_gpus_name_the_setting_that_pretends_them(
    api: Harness,
) -> None:
    await publish(api, [NodeCapacity("local", millicpus=4_000, memory=16 * 2**30)])
    refused = await submit(api.admin, manifest(gpus=1))
    assert refused.status_code == 422
    body = refused.json()
    assert body["field"] == "gpus"
    assert body["detail"] == (
        "1 GPU per learner is more than any node has: the largest node has 0 GPUs; ask for "
        "at most 0 per learner; the local node's GPUs are set on the lifecycle manager with "
        "DLAAS_LOCAL_GPUS"
    )


def gang(learners: int, asks: str) -> bytes:
    return f"name: gang\nlearners: {learners}\n{asks}framework:\n  command: python t.py\n".encode()


@pytest.mark.parametrize(
    ("manifest_text", "field", "detail"),
    [
        (
            # gpu-a holds 8 such learners, gpu-b 4 (A100 both): 12 at most
            gang(13, "gpus: 1\ncpus: 0.25\nmemory: 1Gi\n"),
            "learners",
            "13 learners of 1 GPU and 0.25 CPUs each must run at once, and the cluster's 3 "
            "nodes hold at most 12 such learners even with nothing else running (A100 nodes "
            "counted whole); ask for at most 12 learners, or smaller learners",
        ),
        (
            # CPUs bound it: gpu-a 48, gpu-b 1, cpu-a 2
            gang(52, "cpus: 2\nmemory: 1Gi\n"),
            "learners",
            "52 learners of 2 CPUs each must run at once, and the cluster's 3 nodes hold at "
            "most 51 such learners even with nothing else running (nodes counted whole); ask "
            "for at most 51 learners, or smaller learners",
        ),
        (
            gang(4, "gpus: 4\nelastic: {min_learners: 4, max_learners: 8}\n"),
            "elastic.min_learners",
            "4 learners of 4 GPUs and 1 CPU each must run at once, and the cluster's 3 nodes "
            "hold at most 3 such learners even with nothing else running (A100 nodes counted "
            "whole); ask for at most 3 learners, or smaller learners",
        ),
    ],
    ids=["gpus", "cpus", "elastic"],
)
async def test_a_gang_larger_than_the_whole_cluster_is_refused_naming_the_field(
    kube_api: Harness, manifest_text: bytes, field: str, detail: str
) -> None:
    await publish(kube_api, NODES)
    refused = await submit(kube_api.admin, manifest_text)
    assert refused.status_code == 422, refused.text
    assert refused.json() == {"error": "larger_than_cluster", "detail": detail, "field": field}
    assert (await kube_api.admin.get("/v2/jobs")).json()["jobs"] == []


async def test_a_gang_the_whole_cluster_holds_at_once_is_accepted(kube_api: Harness) -> None:
    await publish(kube_api, NODES)
    for fits in (gang(12, "gpus: 1\ncpus: 0.25\nmemory: 1Gi\n"), gang(51, "cpus: 2\n")):
        accepted = await submit(kube_api.admin, fits)
        assert accepted.status_code == 201, accepted.text
