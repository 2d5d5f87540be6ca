"""The kubernetes backend against kmock's API emulator over HTTP, with the real client.

The lifecycle manager's operations run in-process on SQLite and the real Redis; a test-side
kubelet moves pods through their phases (or runs their command); the pod watcher turns what
it sees into learner events that the monitor applies to the job.
"""

from __future__ import annotations

import asyncio
import io
import json
import zipfile
from datetime import timedelta
from pathlib import Path
from typing import Any

from lifecycle_manager.glue import operations
from lifecycle_manager.glue.context import Context
from lifecycle_manager.glue.learner_specs import learner_specs
from lifecycle_manager.glue.reconcile import reconcile
from storage import jobs as repo
from storage.job_states import JobState
from tests import services
from tests.integration import kube_harness
from tests.integration.kube_harness import (
    core_api,
    events,
    follow,
    load,
    make_job,
    node,
    pod_watcher,
    pods_of,
)
from tests.kube import rbac
from tests.kube.emulator import RunningEmulator
from tests.kube.kubelet import Kubelet

emulator = kube_harness.emulator
namespace = kube_harness.namespace
kube_ctx = kube_harness.kube_ctx

MANIFEST: dict[str, Any] = {
    "cpus": 2,
    "gpus": 1,
    "memory": 4 * 2**30,
    "parameter_server": {"mode": "bounded", "staleness": 4},
    "environment": {"LR": "0.1"},
}


def state_is(ctx: Context, job_id: str, *states: JobState) -> Any:
    async def check() -> bool:
        return (await load(ctx, job_id)).state in states

    return check


async def test_deploy_creates_the_secret_service_and_a_pod_per_learner(
    kube_ctx: Context, emulator: RunningEmulator, namespace: str
) -> None:
    job_id = await make_job(kube_ctx, "python train.py", learners=2, **MANIFEST)
    outcome = await operations.deploy_job(kube_ctx, job_id)
    assert outcome.message == "attempt 1: 2 of 2 learners created"
    root = f"dlaas-{job_id}"
    [secret] = emulator.objects("secrets", namespace)
    [service] = emulator.objects("services", namespace)
    pods = pods_of(emulator, namespace, job_id)
    assert [pod["metadata"]["name"] for pod in pods] == [
        f"dlaas-{job_id}-learner-1-a1",
        f"dlaas-{job_id}-learner-2-a1",
    ]
    owner = {"apiVersion": "v1", "kind": "Secret", "name": root, "uid": secret["metadata"]["uid"]}
    assert service["metadata"]["ownerReferences"] == [owner]
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["selector"] == {"dlaas.io/job": job_id, "dlaas.io/role": "learner"}
    # The job's Secret holds the token minted for the job, never the platform's store keys.
    assert secret["stringData"]["DLAAS_JOB_TOKEN"].startswith("dlaasjob_")
    assert "DLAAS_S3_SECRET_KEY" not in secret["stringData"]
    assert "very-secret-key" not in json.dumps(secret)
    [policy] = emulator.objects("networkpolicies", namespace)
    assert policy["metadata"]["name"] == root
    assert policy["metadata"]["ownerReferences"] == [owner]
    assert policy["spec"]["podSelector"]["matchLabels"] == {
        "dlaas.io/job": job_id,
        "dlaas.io/role": "learner",
    }

    pod = pods[1]
    labels = pod["metadata"]["labels"]
    assert (labels["dlaas.io/job"], labels["dlaas.io/learner"], labels["dlaas.io/role"]) == (
        job_id,
        "2",
        "learner",
    )
    assert pod["metadata"]["ownerReferences"] == [owner]
    spec = pod["spec"]
    assert (spec["hostname"], spec["subdomain"], spec["restartPolicy"]) == (
        "learner-2",
        root,
        "Never",
    )
    [fetch, ps] = spec["initContainers"]
    [learner, shipper] = spec["containers"]
    assert (fetch["name"], learner["name"], shipper["name"]) == ("fetch", "program", "shipper")
    assert learner["resources"] == {
        "requests": {"cpu": "2000m", "memory": str(4 * 2**30), "nvidia.com/gpu": "1"},
        "limits": {
            "cpu": "2000m",
            "memory": str(4 * 2**30),
            "nvidia.com/gpu": "1",
            "ephemeral-storage": "50Gi",
        },
    }
    env = {item["name"]: item for item in learner["env"]}
    assert env["MASTER_ADDR"]["value"] == f"learner-1.{root}.{namespace}.svc"
    assert env["RANK"]["value"] == "1"
    # The program holds no credential; its helpers take the job's from its Secret.
    assert not [item for item in learner["env"] if "valueFrom" in item]
    assert "DLAAS_JOB_TOKEN" not in env and "DLAAS_REDIS_URL" not in env
    helper_env = {item["name"]: item for item in shipper["env"]}
    assert helper_env["DLAAS_JOB_TOKEN"]["valueFrom"] == {
        "secretKeyRef": {"name": root, "key": "DLAAS_JOB_TOKEN"}
    }
    assert fetch["env"] == shipper["env"]
    assert "DLAAS_S3_SECRET_KEY" not in helper_env and "DLAAS_S3_ACCESS_KEY" not in helper_env
    assert "very-secret-key" not in json.dumps(pod)
    assert ps["restartPolicy"] == "Always"
    domain = f"{root}.{namespace}.svc"
    assert ps["command"] == [
        "/usr/local/bin/python", "-I", "-m", "learner_image.ps.server",
        "--job", job_id, "--region", "/dev/shm/dlaas-ps",
        "--mode", "bounded", "--staleness", "4", "--rank", "1", "--world", "2",
        "--listen", "0.0.0.0:7070",
        "--peers", f"learner-1.{domain}:7070,learner-2.{domain}:7070",
    ]  # fmt: skip
    assert env["DLAAS_PS_DIR"]["value"] == "/dev/shm/dlaas-ps"
    assert ps["env"] == shipper["env"]  # a helper: its snapshots go to the job's objects
    shm = {"name": "shm", "mountPath": "/dev/shm"}
    assert shm in ps["volumeMounts"] and shm in learner["volumeMounts"]
    assert {"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": str(4 * 2**30)}} in spec[
        "volumes"
    ]


async def test_a_job_follows_its_pods_from_pending_to_completed(
    kube_ctx: Context, emulator: RunningEmulator, namespace: str
) -> None:
    job_id = await make_job(kube_ctx, "python train.py", learners=2)
    with Kubelet(emulator.url, namespace, hold=True) as kubelet:
        async with pod_watcher(kube_ctx):
            await operations.deploy_job(kube_ctx, job_id)
            names = [pod["metadata"]["name"] for pod in pods_of(emulator, namespace, job_id)]
            for name in names:
                kubelet.bind(name)
            assert (await load(kube_ctx, job_id)).state == JobState.DEPLOYING
            for name in names:
                kubelet.start(name)
            await follow(kube_ctx, state_is(kube_ctx, job_id, JobState.DOWNLOADING))
            for name in names:
                kubelet.finish(name, 0)
            await follow(kube_ctx, state_is(kube_ctx, job_id, JobState.COMPLETED))
    job = await load(kube_ctx, job_id)
    assert "2 learners exited 0" in job.reason
    assert not pods_of(emulator, namespace, job_id)  # a finished job's pods are removed


async def test_cluster_troubles_become_job_events_and_an_oom_kill_fails_the_learner(
    kube_ctx: Context, emulator: RunningEmulator, namespace: str
) -> None:
    job_id = await make_job(
        kube_ctx, "python train.py", learners=2, memory=2**30, restart_policy={"max_restarts": 0}
    )
    with Kubelet(emulator.url, namespace, hold=True) as kubelet:
        async with pod_watcher(kube_ctx):
            await operations.deploy_job(kube_ctx, job_id)
            first, second = [
                pod["metadata"]["name"] for pod in pods_of(emulator, namespace, job_id)
            ]
            kubelet.unschedulable(first, "0/3 nodes are available: 3 Insufficient nvidia.com/gpu.")
            kubelet.waiting(second, "ImagePullBackOff", 'Back-off pulling image "dlaas-learner"')

            async def noticed() -> bool:
                kinds = [kind for kind, _ in await events(kube_ctx, job_id)]
                return kinds.count("cluster") == 2

            await follow(kube_ctx, noticed, what="two cluster notices")
            kubelet.bind(first)
            kubelet.start(first)
            kubelet.finish(first, 137, "OOMKilled")
            await follow(kube_ctx, state_is(kube_ctx, job_id, JobState.FAILED))
    notices = [reason for kind, reason in await events(kube_ctx, job_id) if kind == "cluster"]
    assert notices == [
        "learner 1: cannot be scheduled yet: 0/3 nodes are available: 3 Insufficient "
        "nvidia.com/gpu.",
        "learner 2: its image dlaas-learner:0.1.0 cannot be pulled (ImagePullBackOff): "
        'Back-off pulling image "dlaas-learner"',
        "learner 1: out of memory: the learner was OOMKilled at its memory limit of "
        "1073741824 (exit code 137 (killed by SIGKILL)); raise `memory` in the manifest",
    ]
    reason = (await load(kube_ctx, job_id)).reason
    assert reason.startswith(
        "learner 1 failed: out of memory: the learner was OOMKilled at its memory limit of "
        "1073741824 (exit code 137 (killed by SIGKILL)); raise `memory` in the manifest"
    ), reason
    async with kube_ctx.sessions() as session:
        [refused] = await repo.events_of_kind(session, job_id, "restart_refused")
    assert refused.detail["failure"]["cause"] == "oom"  # the cluster said OOMKilled


async def test_a_learner_scope_restart_replaces_only_the_failed_learners_pod(
    kube_ctx: Context, emulator: RunningEmulator, namespace: str
) -> None:
    job_id = await make_job(
        kube_ctx,
        "python train.py",
        learners=2,
        restart_policy={"scope": "learner", "backoff_s": 0.1},
    )
    replacement = f"dlaas-{job_id}-learner-2-a2"
    with Kubelet(emulator.url, namespace, hold=True) as kubelet:
        async with pod_watcher(kube_ctx):
            await operations.deploy_job(kube_ctx, job_id)
            first, second = [
                pod["metadata"]["name"] for pod in pods_of(emulator, namespace, job_id)
            ]
            for name in (first, second):
                kubelet.bind(name)
                kubelet.start(name)
            uid = pods_of(emulator, namespace, job_id)[0]["metadata"]["uid"]
            assert uid
            kubelet.finish(second, 137)  # reason Error: a SIGKILL, not the OOM killer

            async def replaced() -> bool:
                names = [pod["metadata"]["name"] for pod in pods_of(emulator, namespace, job_id)]
                return names == [first, replacement]

            await follow(kube_ctx, replaced, timeout=20, what="learner 2's pod replaced")
            [kept, _new] = pods_of(emulator, namespace, job_id)
            assert kept["metadata"]["uid"] == uid  # learner 1's pod was left alone
            assert len(emulator.objects("services", namespace)) == 1
            assert len(emulator.objects("secrets", namespace)) == 1
            kubelet.bind(replacement)
            kubelet.start(replacement)
            for name in (first, replacement):
                kubelet.finish(name, 0)
            await follow(kube_ctx, state_is(kube_ctx, job_id, JobState.COMPLETED))
    async with kube_ctx.sessions() as session:
        [restart] = await repo.events_of_kind(session, job_id, "restart")
    failure = restart.detail["failure"]
    assert (failure["learner"], failure["cause"], failure["exit_code"]) == (2, "signal", 137)


async def test_a_learner_ending_while_its_job_waits_for_room_is_acted_on_once_it_deploys(
    kube_ctx: Context, emulator: RunningEmulator, namespace: str
) -> None:
    """Learner 2 fails and the GPU its pod held is taken before it can be created again: the
    job waits QUEUED. Learner 1 ends meanwhile (recorded, not acted on while QUEUED). When
    the sweep deploys learner 2 again, learner 1's end is acted on at once, as a signal."""
    core = core_api(emulator.url)
    core.delete_node("node-1")
    core.create_node(node("gpu-a", {"cpu": "8", "memory": "32Gi", "nvidia.com/gpu": "2"}))
    job_id = await make_job(
        kube_ctx,
        "python train.py",
        learners=2,
        gpus=1,
        cpus=2,
        restart_policy={"scope": "learner", "backoff_s": 0.1},
    )
    squatter = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "another-teams-pod"},
        "spec": {
            "containers": [
                {"name": "main", "image": "x", "resources": {"requests": {"nvidia.com/gpu": "1"}}}
            ]
        },
    }
    with Kubelet(emulator.url, namespace, node="gpu-a", hold=True) as kubelet:
        async with pod_watcher(kube_ctx):
            await operations.deploy_job(kube_ctx, job_id)
            first, second = [
                pod["metadata"]["name"] for pod in pods_of(emulator, namespace, job_id)
            ]
            for name in (first, second):
                kubelet.bind(name)
                kubelet.start(name)
            await follow(kube_ctx, state_is(kube_ctx, job_id, JobState.DOWNLOADING))
            core.create_namespaced_pod(namespace, squatter)  # waits for the next free GPU
            kubelet.finish(second, 7)
            await follow(kube_ctx, state_is(kube_ctx, job_id, JobState.QUEUED), timeout=20)
            assert (await load(kube_ctx, job_id)).reason.startswith("waiting for capacity")

            kubelet.finish(first, 137)  # reason Error: a SIGKILL, not the OOM killer

            async def learner_1_failed() -> bool:
                return (await learner_rows(kube_ctx, job_id))[1] == (1, "FAILED")

            await follow(kube_ctx, learner_1_failed, what="learner 1's end recorded")
            assert (await load(kube_ctx, job_id)).state == JobState.QUEUED  # not acted on yet

            report = await reconcile(kube_ctx)  # learner 1's GPU is free: learner 2 fits
            assert report.deployed == [job_id]
            async with kube_ctx.sessions() as session:
                restarts = await repo.events_of_kind(session, job_id, "restart")
            assert [r.detail["failure"]["learner"] for r in restarts] == [2, 1]
            failure = restarts[-1].detail["failure"]
            assert (failure["cause"], failure["exit_code"]) == ("signal", 137)
            assert (await load(kube_ctx, job_id)).state == JobState.RECOVERING


TRAIN = """\
import sys, time
from learner_image.sdk import load_checkpoint, save_checkpoint
checkpoint = load_checkpoint()
if checkpoint is None:
    save_checkpoint(lambda: b"41", step=41)
    time.sleep(1.5)  # the runner uploads committed checkpoints as they appear
    print("crashing on purpose", flush=True)
    sys.exit(5)
print("resumed at step", checkpoint.step, checkpoint.read("state.bin").decode(), flush=True)
"""


def model_zip(files: dict[str, str]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, text in files.items():
            archive.writestr(name, text)
    return buffer.getvalue()


async def restartable_job(ctx: Context, train: str) -> str:
    """A job running `train` as train.py, checkpointing, restarted up to twice."""
    job_id = await make_job(
        ctx,
        "python train.py",
        checkpoint={"interval_s": 1, "keep": 2},
        restart_policy={"max_restarts": 2, "backoff_s": 0.1},
    )
    ctx.objects.put_bytes(f"jobs/{job_id}/model.zip", model_zip({"train.py": train}))
    return job_id


async def test_a_failed_learner_pod_is_replaced_and_resumes_from_the_checkpoint(
    kube_ctx: Context, emulator: RunningEmulator, namespace: str, tmp_path: Path
) -> None:
    job_id = await restartable_job(kube_ctx, TRAIN)
    # The runners reach the job's objects through the API's gateway, as in a cluster.
    api = services.start_gateway_api(kube_ctx.settings, tmp_path / "api")
    try:
        with Kubelet(emulator.url, namespace, run_commands=True, workdir=tmp_path / "pods"):
            async with pod_watcher(kube_ctx):
                await operations.deploy_job(kube_ctx, job_id)
                completed = state_is(kube_ctx, job_id, JobState.COMPLETED)
                await follow(kube_ctx, completed, timeout=40)
    finally:
        api.stop()
    job = await load(kube_ctx, job_id)
    assert (job.attempt, job.restarts) == (2, 1)
    log = kube_ctx.objects.get_bytes(f"jobs/{job_id}/logs/learner-1.log").decode()
    assert "crashing on purpose" in log
    assert "resumed at step 41 41" in log
    async with kube_ctx.sessions() as session:
        [restart] = await repo.events_of_kind(session, job_id, "restart")
    assert restart.detail["failure"]["last_line"] == "crashing on purpose"
    # The failed attempt's pod was deleted and replaced by the next attempt's.
    created = [
        reason for kind, reason in await events(kube_ctx, job_id) if kind == "learners_created"
    ]
    assert created == [
        f"created 1 learner: dlaas-{job_id}-learner-1-a1",
        f"created 1 learner: dlaas-{job_id}-learner-1-a2",
    ]


async def test_delete_removes_every_object_the_job_created(
    kube_ctx: Context, emulator: RunningEmulator, namespace: str
) -> None:
    job_id = await make_job(kube_ctx, "python train.py", learners=3)
    other = await make_job(kube_ctx, "python train.py", learners=2)
    await operations.deploy_job(kube_ctx, job_id)
    await operations.deploy_job(kube_ctx, other)
    outcome = await operations.delete_job(kube_ctx, job_id)
    assert outcome.message == "deleted"
    remaining = [
        obj["metadata"]["labels"]["dlaas.io/job"]
        for plural in ("pods", "services", "secrets")
        for obj in emulator.objects(plural, namespace)
    ]
    assert sorted(remaining) == [other] * 4  # 2 pods, its Service and its Secret


async def test_deleting_up_to_an_attempt_spares_a_newer_one_and_what_it_uses(
    kube_ctx: Context, emulator: RunningEmulator, namespace: str
) -> None:
    job_id = await make_job(kube_ctx, "python train.py", learners=2)
    await operations.deploy_job(kube_ctx, job_id)
    specs = learner_specs(
        job_id=job_id,
        owner_id=1,
        attempt=2,
        num_learners=2,
        manifest={"learners": 2, "framework": {"command": "python train.py"}},
        settings=kube_ctx.settings,
    )
    await kube_ctx.backend.create_learners(specs[:1])  # learner 1 of a newer attempt
    assert await kube_ctx.backend.delete_learners(job_id, up_to_attempt=1, wait=5)
    assert await kube_ctx.backend.delete_learner_of(job_id, 1, up_to_attempt=1, wait=5)
    names = {
        plural: [obj["metadata"]["name"] for obj in emulator.objects(plural, namespace)]
        for plural in ("pods", "services", "secrets")
    }
    assert names["pods"] == [f"dlaas-{job_id}-learner-1-a2"]
    assert len(names["services"]) == len(names["secrets"]) == 1  # attempt 2 uses them


async def test_api_errors_and_timeouts_mid_deploy_are_retried_without_duplicates(
    kube_ctx: Context, emulator: RunningEmulator, namespace: str
) -> None:
    job_id = await make_job(kube_ctx, "python train.py", learners=4)
    name = f"dlaas-{job_id}-learner-{{}}-a1".format

    async def too_slow(_request: object) -> dict[str, str]:
        await asyncio.sleep(2.5)  # past the client's 2 s timeout; the pod is stored already
        return {}

    # Learner 2's pod is refused (503) on every try of the first deploy, before it is
    # stored; learner 3's first try times out after it was stored.
    emulator.refuse(name(2), 503, times=3)
    slow = {"metadata": {"name": name(3)}}
    emulator.call(
        lambda: emulator.emulator[f"post /api/v1/namespaces/{namespace}/pods", slow][:1] << too_slow
    )
    first = await operations.deploy_job(kube_ctx, job_id)
    assert first.retry_after is not None
    assert "HTTP 503" in first.message
    assert [pod["metadata"]["name"] for pod in pods_of(emulator, namespace, job_id)] == [
        name(1),
        name(3),
        name(4),
    ]
    second = await operations.deploy_job(kube_ctx, job_id)
    assert second.message == "attempt 1: 1 of 4 learners created"
    names = [pod["metadata"]["name"] for pod in pods_of(emulator, namespace, job_id)]
    assert names == [name(n) for n in (1, 2, 3, 4)]
    assert len(emulator.objects("secrets", namespace)) == 1
    assert len(emulator.objects("services", namespace)) == 1


async def test_one_passing_error_is_retried_within_the_call(
    kube_ctx: Context, emulator: RunningEmulator, namespace: str
) -> None:
    job_id = await make_job(kube_ctx, "python train.py", learners=2)
    emulator.call(
        lambda: emulator.emulator[f"post /api/v1/namespaces/{namespace}/pods"][0:1] << 503
    )
    outcome = await operations.deploy_job(kube_ctx, job_id)
    # The 503 came after the pod was stored; its retry found it: still one pod, made here.
    assert outcome.message == "attempt 1: 2 of 2 learners created"
    assert len(pods_of(emulator, namespace, job_id)) == 2


async def learner_rows(ctx: Context, job_id: str) -> dict[int, tuple[int, str]]:
    async with ctx.sessions() as session:
        return {
            row.index: (row.attempt, row.state) for row in await repo.learners_of(session, job_id)
        }


async def test_a_gang_the_nodes_cannot_hold_waits_queued_without_creating_anything(
    kube_ctx: Context, emulator: RunningEmulator, namespace: str
) -> None:
    core = core_api(emulator.url)
    core.delete_node("node-1")
    for name in ("gpu-a", "gpu-b"):
        core.create_node(node(name, {"cpu": "8", "memory": "32Gi", "nvidia.com/gpu": "2"}))
    job_id = await make_job(kube_ctx, "python train.py", learners=3, gpus=2, cpus=4)
    logged: list[tuple[str, str]] = []
    for _try in range(3):  # weighed again and again: still waiting, nothing made
        outcome = await operations.deploy_job(kube_ctx, job_id)
        assert "too big for the cluster as it is now" in outcome.message, outcome
        job = await load(kube_ctx, job_id)
        assert (job.state, job.attempt) == (JobState.QUEUED, 0)
        assert job.reason.startswith(
            "too big for the cluster as it is now: needs 3 learners of 2 GPUs"
        ), job.reason
        assert ("waiting", job.reason) in await events(kube_ctx, job_id)
        assert await learner_rows(kube_ctx, job_id) == {}
        assert not pods_of(emulator, namespace, job_id)
        assert not emulator.objects("secrets", namespace)
        # Waiting on adds no events: only the first pass's word is one.
        assert not logged or await events(kube_ctx, job_id) == logged
        logged = await events(kube_ctx, job_id)

    core.create_node(node("gpu-c", {"cpu": "8", "memory": "32Gi", "nvidia.com/gpu": "2"}))
    report = await reconcile(kube_ctx)  # the sweep's scheduling pass
    assert report.deployed == [job_id]
    job = await load(kube_ctx, job_id)
    assert (job.state, job.attempt) == (JobState.DEPLOYING, 1)
    assert [pod["metadata"]["name"] for pod in pods_of(emulator, namespace, job_id)] == [
        f"dlaas-{job_id}-learner-{n}-a1" for n in (1, 2, 3)
    ]
    assert await learner_rows(kube_ctx, job_id) == {n: (1, "PENDING") for n in (1, 2, 3)}
    assert (
        "learners_created",
        f"created 3 learners: dlaas-{job_id}-learner-1-a1, "
        f"dlaas-{job_id}-learner-2-a1, dlaas-{job_id}-learner-3-a1",
    ) in await events(kube_ctx, job_id)


async def test_a_gang_that_stays_too_big_after_nodes_leave_fails_saying_why(
    kube_ctx: Context, emulator: RunningEmulator, namespace: str
) -> None:
    core = core_api(emulator.url)
    core.delete_node("node-1")
    for name in ("gpu-a", "gpu-b"):
        core.create_node(node(name, {"cpu": "8", "memory": "32Gi", "nvidia.com/gpu": "2"}))
    job_id = await make_job(kube_ctx, "python train.py", learners=2, gpus=2, cpus=4)
    core.delete_node("gpu-b")  # before it was placed: now it can never start
    outcome = await operations.deploy_job(kube_ctx, job_id)
    assert "too big for the cluster as it is now" in outcome.message, outcome
    assert (await load(kube_ctx, job_id)).state == JobState.QUEUED

    fail_after_s = kube_ctx.settings.unschedulable_fail_after_s
    started = kube_ctx.clock()
    kube_ctx.clock = lambda: started + timedelta(seconds=fail_after_s / 2)
    await operations.deploy_job(kube_ctx, job_id)
    assert (await load(kube_ctx, job_id)).state == JobState.QUEUED  # not yet: a node may return

    kube_ctx.clock = lambda: started + timedelta(seconds=fail_after_s + 1)
    await operations.deploy_job(kube_ctx, job_id)
    job = await load(kube_ctx, job_id)
    assert job.state == JobState.FAILED
    assert job.reason.startswith("never fit: needs 2 learners of 2 GPUs"), job.reason
    assert job.reason.endswith(
        f"it stayed too big for the cluster for {fail_after_s:g} s "
        "(DLAAS_UNSCHEDULABLE_FAIL_AFTER_S)"
    ), job.reason
    assert not pods_of(emulator, namespace, job_id)


async def test_the_watch_lists_again_when_its_resource_version_expires(
    kube_ctx: Context, emulator: RunningEmulator, namespace: str
) -> None:
    job_id = await make_job(kube_ctx, "python train.py", learners=2)
    await operations.deploy_job(kube_ctx, job_id)
    first, second = [pod["metadata"]["name"] for pod in pods_of(emulator, namespace, job_id)]
    with Kubelet(emulator.url, namespace, hold=True) as kubelet:
        async with pod_watcher(kube_ctx) as watcher:
            kubelet.bind(first)
            kubelet.start(first)
            await follow(kube_ctx, state_is(kube_ctx, job_id, JobState.DOWNLOADING))
            assert watcher.lists == 1
            emulator.expire_watches()
            kubelet.start(second)  # the change that reveals the expiry to the open watch

            async def listed_again() -> bool:
                return watcher.lists >= 2

            await follow(kube_ctx, listed_again, what="a second list")
            kubelet.finish(first, 0)
            kubelet.finish(second, 0)
            await follow(kube_ctx, state_is(kube_ctx, job_id, JobState.COMPLETED))


VERBS = {"list": "list", "watch": "watch", "fetch": "get", "create": "create"}
VERBS.update({"update": "patch", "delete": "delete"})


async def test_the_backend_uses_exactly_what_the_charts_rbac_grants(
    kube_ctx: Context, emulator: RunningEmulator, namespace: str
) -> None:
    job_id = await make_job(kube_ctx, "python train.py", learners=2)
    async with pod_watcher(kube_ctx) as watcher:
        await operations.deploy_job(kube_ctx, job_id)
        await operations.deploy_job(kube_ctx, job_id)  # again: the Secret is patched
        await kube_ctx.backend.create_learners([])
        await kube_ctx.backend.list_learners()

        async def watching() -> bool:
            return watcher.lists >= 1

        await follow(kube_ctx, watching, what="the pod watcher's first list")
        await operations.delete_job(kube_ctx, job_id)
    used: dict[tuple[str, str], set[str]] = {}
    for request in emulator.call(lambda: list(emulator.emulator)):
        if request.resource is None:
            continue
        verb = VERBS[request.action.value.lower()]
        if (request.resource.plural, verb) == ("nodes", "create"):
            continue  # the test's own node
        scope = "namespaced" if request.namespace else "cluster-wide"
        used.setdefault((scope, request.resource.plural), set()).add(verb)
    # Every verb it used is granted, and every verb granted is used.
    assert used == {
        **{("namespaced", plural): verbs for plural, verbs in rbac.NAMESPACED.items()},
        **{("cluster-wide", plural): verbs for plural, verbs in rbac.CLUSTER_WIDE.items()},
    }
