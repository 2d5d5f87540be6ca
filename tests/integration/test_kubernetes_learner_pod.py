"""A learner pod's three containers at work: jobs run through the kubernetes backend on the API
emulator, the test kubelet running each pod's `fetch`, then its `program` and `shipper`
containers as local processes (each with its own environment, each in a PID namespace of
its own, the pod's volumes as shared local directories). The runners reach the job's objects
through the API's gateway with the job's token, as in a cluster.

- A job runs to COMPLETED with its log, metrics, checkpoint and results stored, its
  program given the manifest's environment.
- A pod sent SIGTERM stops its program; its committed checkpoint and log are still stored,
  its exit report says stopped, and the job resumes from that checkpoint.
- A program that looks for credentials (its environment, every process's environment it
  can see, every file of the shared directory, the service-account token) finds none.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lifecycle_manager.backends.kubernetes.backend import KubernetesBackend
from lifecycle_manager.backends.kubernetes.manifests import SECRET_ENV
from lifecycle_manager.glue import operations
from lifecycle_manager.glue.context import Context
from storage.exit_reports import ExitReport
from storage.job_states import JobState
from tests import services
from tests.integration import kube_harness
from tests.integration.kube_harness import core_api, follow, load, make_job, pod_watcher
from tests.integration.test_kubernetes_backend import model_zip, restartable_job, state_is
from tests.kube.emulator import RunningEmulator
from tests.kube.kubelet import Kubelet, isolation

emulator = kube_harness.emulator
namespace = kube_harness.namespace
kube_ctx = kube_harness.kube_ctx

TIMEOUT_S = 60.0  # bounds a wait; nothing here depends on how long anything takes
LOOK_AROUND = Path(__file__).parents[1] / "kube" / "look_around.py"

TRAIN = """\
import json, os, pathlib
from learner_image.sdk import save_checkpoint
for step in range(3):
    print(json.dumps({"dlaas_metric": True, "step": step, "loss": 1.0 / (step + 1)}), flush=True)
save_checkpoint(lambda: b"weights", step=3, blocking=True)
pathlib.Path(os.environ["RESULT_DIR"], "model.txt").write_text("trained\\n")
print("greeting:", os.environ["GREETING"], flush=True)
print("done training", flush=True)
"""

STOPPABLE = """\
import sys, time
from learner_image.sdk import load_checkpoint, save_checkpoint
checkpoint = load_checkpoint()
if checkpoint is not None:
    print("resumed at step", checkpoint.step, flush=True)
    sys.exit(0)
save_checkpoint(lambda: b"7", step=7, blocking=True)
print("waiting to be stopped", flush=True)
while True:  # until the pod is deleted
    time.sleep(0.05)
"""


@pytest.fixture
def gateway(kube_ctx: Context, tmp_path: Path) -> Iterator[None]:
    api = services.start_gateway_api(kube_ctx.settings, tmp_path / "api")
    try:
        yield
    finally:
        api.stop()


def pod_dir(tmp_path: Path, job_id: str, attempt: int) -> Path:
    return tmp_path / "pods" / f"dlaas-{job_id}-learner-1-a{attempt}"


async def test_a_job_runs_to_completed_with_its_output_stored_by_the_helpers(
    kube_ctx: Context, emulator: RunningEmulator, namespace: str, tmp_path: Path, gateway: None
) -> None:
    job_id = await make_job(
        kube_ctx,
        "python train.py",
        checkpoint={"interval_s": 1, "keep": 2},
        environment={"GREETING": "from the manifest"},
    )
    kube_ctx.objects.put_bytes(f"jobs/{job_id}/model.zip", model_zip({"train.py": TRAIN}))
    with Kubelet(emulator.url, namespace, run_commands=True, workdir=tmp_path / "pods"):
        async with pod_watcher(kube_ctx):
            await operations.deploy_job(kube_ctx, job_id)
            completed = state_is(kube_ctx, job_id, JobState.COMPLETED, JobState.FAILED)
            await follow(kube_ctx, completed, timeout=TIMEOUT_S, what="the job to end")
    job = await load(kube_ctx, job_id)
    assert job.state == JobState.COMPLETED, job.reason
    objects = kube_ctx.objects
    log = objects.get_bytes(f"jobs/{job_id}/logs/learner-1.log").decode()
    assert "done training" in log
    assert "greeting: from the manifest" in log  # the user's environment, in the program
    points = objects.get_bytes(f"jobs/{job_id}/metrics/learner-1.jsonl").decode().splitlines()
    assert [json.loads(point)["step"] for point in points] == [0, 1, 2]
    assert objects.exists(f"jobs/{job_id}/checkpoints/ckpt-000000000003/COMMITTED")
    assert objects.get_bytes(f"jobs/{job_id}/results/model.txt") == b"trained\n"
    # Each part ran in its own container; the shipper's report is the learner's.
    pod = pod_dir(tmp_path, job_id, 1)
    for container in ("fetch", "program", "shipper"):
        assert (pod / f"{container}.output.log").exists(), container
    report = ExitReport.from_json((pod / "shipper.termination-log").read_text())
    assert report is not None and (report.exit_code, report.stopped) == (0, False)
    assert report.last_line == "done training"


async def test_a_stopped_pod_stores_its_checkpoint_and_log_and_says_it_was_stopped(
    kube_ctx: Context, emulator: RunningEmulator, namespace: str, tmp_path: Path, gateway: None
) -> None:
    # A generous grace period: on a busy machine too, the shipper stores within it.
    backend = kube_ctx.backend
    assert isinstance(backend, KubernetesBackend)
    backend.options = dataclasses.replace(backend.options, stop_grace_s=30)
    job_id = await restartable_job(kube_ctx, STOPPABLE)
    committed = f"jobs/{job_id}/checkpoints/ckpt-000000000007/COMMITTED"

    async def checkpoint_stored() -> bool:
        return kube_ctx.objects.exists(committed)

    with Kubelet(emulator.url, namespace, run_commands=True, workdir=tmp_path / "pods"):
        async with pod_watcher(kube_ctx):
            await operations.deploy_job(kube_ctx, job_id)
            await follow(kube_ctx, checkpoint_stored, timeout=TIMEOUT_S, what="the checkpoint")
            # SIGTERM to the pod (its containers), as a halt or a restart sends it.
            core_api(emulator.url).delete_namespaced_pod(f"dlaas-{job_id}-learner-1-a1", namespace)
            completed = state_is(kube_ctx, job_id, JobState.COMPLETED, JobState.FAILED)
            await follow(kube_ctx, completed, timeout=TIMEOUT_S, what="the job to end")
    job = await load(kube_ctx, job_id)
    assert (job.state, job.attempt) == (JobState.COMPLETED, 2), job.reason
    log = kube_ctx.objects.get_bytes(f"jobs/{job_id}/logs/learner-1.log").decode()
    stopped_at = log.index("[dlaas] stopped by SIGTERM")
    assert log.index("waiting to be stopped") < stopped_at < log.index("resumed at step 7")
    report = ExitReport.from_json(
        (pod_dir(tmp_path, job_id, 1) / "shipper.termination-log").read_text()
    )
    assert report is not None
    assert (report.exit_code, report.signal, report.stopped) == (143, "SIGTERM", True)


@pytest.mark.skipif(
    not isolation(),
    reason="the test kubelet needs PID namespaces (unshare) to keep a "
    "program's /proc apart from its helpers', as a pod's containers are",
)
async def test_a_programs_look_around_finds_no_credential(
    kube_ctx: Context, emulator: RunningEmulator, namespace: str, tmp_path: Path, gateway: None
) -> None:
    job_id = await make_job(kube_ctx, "python look_around.py")
    program = {"look_around.py": LOOK_AROUND.read_text()}
    kube_ctx.objects.put_bytes(f"jobs/{job_id}/model.zip", model_zip(program))
    with Kubelet(emulator.url, namespace, run_commands=True, workdir=tmp_path / "pods"):
        async with pod_watcher(kube_ctx):
            await operations.deploy_job(kube_ctx, job_id)
            [secret] = emulator.objects("secrets", namespace)
            completed = state_is(kube_ctx, job_id, JobState.COMPLETED, JobState.FAILED)
            await follow(kube_ctx, completed, timeout=TIMEOUT_S, what="the job to end")
    assert (await load(kube_ctx, job_id)).state == JobState.COMPLETED
    log = kube_ctx.objects.get_bytes(f"jobs/{job_id}/logs/learner-1.log").decode()
    [line] = [line for line in log.splitlines() if line.startswith('{"looked_around"')]
    found: dict[str, Any] = json.loads(line)["looked_around"]
    settings = kube_ctx.settings
    credentials = {
        "the job's token": secret["stringData"]["DLAAS_JOB_TOKEN"],
        "the job's Redis URL": secret["stringData"]["DLAAS_REDIS_URL"],
        "the platform's Redis URL": settings.redis_url,
        "the S3 access key": settings.s3_access_key,
        "the S3 secret key": settings.s3_secret_key,
    }
    assert all(credentials.values())
    everything = json.dumps(found)
    leaks = [what for what, value in credentials.items() if value and value in everything]
    assert not leaks, leaks
    assert not [name for name in found["env"] if name in (*SECRET_ENV, "DLAAS_JOB_OBJECTS_URL")]
    assert found["service_account_token"] is False
    # It did look: at the launcher's environment (no helper's process is in sight) and at
    # the control files the program's container leaves its shipper.
    assert found["environs"]
    assert not [text for text in found["environs"].values() if "DLAAS_RUNNER_DIR" in text]
    assert any("/.dlaas/" in path for path in found["files"])
