"""The local backend's node, as the lifecycle manager reports it, and a learner asking for
its pretend GPUs, against a real node agent."""

from __future__ import annotations

import json
import secrets
import sys
from pathlib import Path

from lifecycle_manager.backends import open_backend
from lifecycle_manager.backends.base import LearnerSpec, Resources
from lifecycle_manager.backends.local.capacity import local_node
from storage.settings import Settings
from tests.integration import test_lifecycle_harness as harness
from tests.integration.test_lifecycle_harness import Agent, eventually

shared_agent = harness.shared_agent
agent = harness.agent

DUMP_ENV = "import json, os; json.dump(dict(os.environ), open('env.json', 'w'))"


def local_settings(tmp_path: Path, agent: Agent, **local: object) -> Settings:
    return Settings(home=tmp_path / "home", agent_url=agent.url, agent_token=agent.token, **local)


async def test_the_local_backend_reports_its_one_node_from_the_settings(
    tmp_path: Path, agent: Agent
) -> None:
    settings = local_settings(
        tmp_path,
        agent,
        local_gpus=8,
        local_gpu_product="A100-pretend",
        local_cpus=6,
        local_memory="32GiB",
    )
    backend = open_backend(settings)
    try:
        [node] = await backend.nodes()
        assert node == local_node(settings)
        assert (node.name, node.gpus, node.gpu_product, node.pretend_gpus) == (
            "local",
            8,
            "A100-pretend",
            True,
        )
        assert (node.millicpus, node.memory) == (6000, 32 * 2**30)
    finally:
        await backend.aclose()


async def test_a_learner_asking_for_pretend_gpus_gets_no_cuda_device(
    tmp_path: Path, agent: Agent
) -> None:
    backend = open_backend(local_settings(tmp_path, agent, local_gpus=4))
    job = f"training-{secrets.token_hex(5)}"
    spec = LearnerSpec(
        job_id=job,
        learner=1,
        attempt=1,
        num_learners=1,
        command=[sys.executable, "-c", DUMP_ENV],
        env={"TRAINING_ID": job, "GPU_COUNT": "2"},
        resources=Resources(gpus=2),
        node="elsewhere",  # the local backend has one node: a placement changes nothing
    )
    dumped = agent.root / "jobs" / job / "learner-1" / "a1" / "env.json"
    try:
        assert await backend.create_learners([spec]) == [spec.name]

        async def written() -> bool:
            return dumped.exists() and dumped.read_text().endswith("}")

        await eventually(written, what="the learner's environment")
    finally:
        await backend.aclose()
    env = json.loads(dumped.read_text())
    assert (env["DLAAS_PRETEND_GPUS"], env["CUDA_VISIBLE_DEVICES"], env["GPU_COUNT"]) == (
        "2",
        "",
        "2",
    )
