"""The chart's shutdown hook (`helm uninstall`'s pre-delete Job) against the API emulator, with
the real client: the workers are scaled to 0 and gone before any learner pod is deleted, the
learner pods are deleted with their own grace period and waited for, and only then is the
monitor scaled to 0 and waited for. It uses exactly what the chart's hook RBAC grants.

The test plays the cluster's part: a held pod (a finalizer of the test's) stays, terminating,
after its deletion until the test lets it go, as a pod within its grace period does; the test
deletes a scaled Deployment's pods, as its controller would. Then, with the lifecycle
manager on the emulator: a job whose learner the hook stopped is recorded as interrupted,
and the next install's reconcile resumes it without using a restart.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import pytest
from kubernetes import client

from lifecycle_manager.backends.kubernetes.client import Caller
from lifecycle_manager.backends.kubernetes.manifests import job_labels
from lifecycle_manager.backends.kubernetes.shutdown import Plan, Report, Shutdown
from lifecycle_manager.decisions.shutdown_order import Stage
from lifecycle_manager.glue import operations
from lifecycle_manager.glue.context import Context
from lifecycle_manager.glue.reconcile import reconcile
from storage import jobs as repo
from storage.exit_reports import ExitReport
from storage.job_states import JobState
from tests.integration import kube_harness
from tests.integration.kube_harness import core_api, follow, load, make_job, pod_watcher, pods_of
from tests.integration.test_lifecycle_harness import eventually
from tests.kube import rbac
from tests.kube.emulator import RunningEmulator, running_emulator
from tests.kube.kubelet import Kubelet

emulator = kube_harness.emulator
namespace = kube_harness.namespace
kube_ctx = kube_harness.kube_ctx

RELEASE_NS = "dlaas-system"
LEARNERS_NS = "dlaas-learners"
HOLD = "dlaas.test/hold"
TEST_AGENT = "dlaas-test-cluster"  # the test's own requests, told apart from the hook's


def component(name: str) -> dict[str, str]:
    return {
        "app.kubernetes.io/name": "dlaas",
        "app.kubernetes.io/instance": "dlaas",
        "app.kubernetes.io/component": name,
    }


PLAN = Plan(
    namespace=RELEASE_NS,
    learners_namespace=LEARNERS_NS,
    worker="dlaas-worker",
    worker_selector=component("worker"),
    monitor="dlaas-monitor",
    monitor_selector=component("monitor"),
    timeout_s=30.0,
)


class Cluster:
    """The test's side of the cluster: objects made, deleted and let go through the API."""

    def __init__(self, emulator: RunningEmulator) -> None:
        self.emulator = emulator
        api = client.ApiClient(client.Configuration(host=emulator.url))
        api.user_agent = TEST_AGENT
        self.core = client.CoreV1Api(api)
        self.apps = client.AppsV1Api(api)

    def deployment(self, name: str, replicas: int, labels: dict[str, str]) -> None:
        body = {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": name, "labels": labels},
            "spec": {"replicas": replicas, "selector": {"matchLabels": labels}, "template": {}},
        }
        self.apps.create_namespaced_deployment(RELEASE_NS, body)

    def pod(
        self, namespace: str, name: str, labels: dict[str, str], phase: str = "Running"
    ) -> None:
        body = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "labels": labels, "finalizers": [HOLD]},
            "spec": {"terminationGracePeriodSeconds": 30, "containers": []},
            "status": {"phase": phase},
        }
        self.core.create_namespaced_pod(namespace, body)

    def let_go(self, namespace: str, name: str) -> None:
        """The held pod ended: it goes, if it was deleted."""
        self.core.patch_namespaced_pod(name, namespace, {"metadata": {"finalizers": []}})

    def pods(self, namespace: str) -> dict[str, dict[str, Any]]:
        return {p["metadata"]["name"]: p for p in self.emulator.objects("pods", namespace)}

    def terminating(self, namespace: str) -> set[str]:
        return {
            name
            for name, p in self.pods(namespace).items()
            if p["metadata"].get("deletionTimestamp")
        }

    def hooks_requests(self) -> list[Any]:
        served = self.emulator.call(lambda: list(self.emulator.emulator))
        return [
            r
            for r in served
            if r.resource is not None and r.headers.get("User-Agent") != TEST_AGENT
        ]

    def listed_after_scaling(self, deployment: str) -> bool:
        """Whether the hook listed the release's pods since it scaled `deployment` to 0: it
        has seen that Deployment's pods."""
        requests = self.hooks_requests()
        scaled = [
            i for i, r in enumerate(requests) if r.subresource == "scale" and r.name == deployment
        ]
        return bool(scaled) and any(
            r.action.value.lower() == "list" and r.namespace == RELEASE_NS
            for r in requests[scaled[0] + 1 :]
        )

    def replicas(self, name: str) -> int:
        [found] = [
            d
            for d in self.emulator.objects("deployments", RELEASE_NS)
            if d["metadata"]["name"] == name
        ]
        return int(found["spec"]["replicas"])


def until(check: Callable[[], bool], what: str, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.01)


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    with running_emulator() as emulator:
        made = Cluster(emulator)
        made.deployment("dlaas-worker", 2, component("worker"))
        made.deployment("dlaas-monitor", 1, component("monitor"))
        made.deployment("dlaas-api", 1, component("api"))
        yield made


def learner(job: str, index: int) -> dict[str, str]:
    return {**job_labels(job, "learner"), "dlaas.io/learner": str(index), "dlaas.io/attempt": "1"}


def start_hook(
    cluster: Cluster, pool: ThreadPoolExecutor, said: list[str], plan: Plan = PLAN, **kw: Any
) -> Future[Report]:
    calls = Caller(client.ApiClient(client.Configuration(host=cluster.emulator.url)))
    return pool.submit(Shutdown(calls, plan, poll_s=0.02, say=said.append, **kw).run)


def test_learners_stop_after_the_workers_and_are_waited_for_before_the_monitor(
    cluster: Cluster,
) -> None:
    for name in ("dlaas-worker-1", "dlaas-worker-2"):
        cluster.pod(RELEASE_NS, name, component("worker"))
    cluster.pod(RELEASE_NS, "dlaas-monitor-1", component("monitor"))
    cluster.pod(RELEASE_NS, "dlaas-api-1", component("api"))
    running = {"dlaas-j1-learner-1-a1", "dlaas-j1-learner-2-a1", "dlaas-j2-learner-1-a1"}
    for name in running:
        job, index = name.split("-")[1], int(name.split("-")[3])
        cluster.pod(LEARNERS_NS, name, learner(job, index))
    cluster.pod(LEARNERS_NS, "dlaas-j3-learner-1-a1", learner("j3", 1), phase="Succeeded")
    cluster.pod(LEARNERS_NS, "someone-elses", {"app": "other"})

    said: list[str] = []
    with ThreadPoolExecutor(1) as pool:
        hook = start_hook(cluster, pool, said)
        until(lambda: cluster.replicas("dlaas-worker") == 0, "the workers scaled to 0")
        until(lambda: cluster.listed_after_scaling("dlaas-worker"), "the workers' pods listed")
        # The workers' controller deletes their pods; each finishes its task first.
        for name in ("dlaas-worker-1", "dlaas-worker-2"):
            cluster.core.delete_namespaced_pod(name, RELEASE_NS)
        assert not cluster.terminating(LEARNERS_NS), "a learner stopped while a worker runs"
        cluster.let_go(RELEASE_NS, "dlaas-worker-1")
        assert not cluster.terminating(LEARNERS_NS) and not hook.done()
        cluster.let_go(RELEASE_NS, "dlaas-worker-2")

        until(lambda: cluster.terminating(LEARNERS_NS) == running, "the learners deleted")
        for name in sorted(running):
            # Each learner checkpoints within its grace period: the monitor, which records
            # that its job was interrupted, stays until the last one is gone.
            assert not hook.done() and cluster.replicas("dlaas-monitor") == 1
            cluster.let_go(LEARNERS_NS, name)

        until(lambda: cluster.replicas("dlaas-monitor") == 0, "the monitor scaled to 0")
        until(lambda: cluster.listed_after_scaling("dlaas-monitor"), "the monitor's pod listed")
        cluster.core.delete_namespaced_pod("dlaas-monitor-1", RELEASE_NS)
        assert not hook.done()
        cluster.let_go(RELEASE_NS, "dlaas-monitor-1")
        report = hook.result(timeout=15)

    assert report.timed_out is None and report.left == []
    assert report.stopped == {
        Stage.WORKERS: ["dlaas-worker-1", "dlaas-worker-2"],
        Stage.LEARNERS: sorted(running),
        Stage.MONITOR: ["dlaas-monitor-1"],
    }
    assert any("3 learner pod(s) stopped with their grace period" in line for line in said)
    # What the hook does not stop is left as it is: the API, a learner that finished, a pod
    # that is not dlaas's.
    assert cluster.replicas("dlaas-api") == 1
    assert set(cluster.pods(RELEASE_NS)) == {"dlaas-api-1"}
    assert set(cluster.pods(LEARNERS_NS)) == {"dlaas-j3-learner-1-a1", "someone-elses"}
    assert not cluster.terminating(LEARNERS_NS)

    hooks = cluster.hooks_requests()
    deletes = [r for r in hooks if r.action.value.lower() == "delete"]
    # The pods' own grace period: the hook gives none of its own.
    assert deletes and all("gracePeriodSeconds" not in (r.data or {}) for r in deletes)
    assert all("gracePeriodSeconds" not in r.params for r in deletes)
    assert used(hooks) == {RELEASE_NS: rbac.SHUTDOWN, LEARNERS_NS: rbac.SHUTDOWN_LEARNERS}


VERBS = {"list": "list", "update": "patch", "delete": "delete"}


def used(requests: list[Any]) -> dict[str, dict[str, set[str]]]:
    """What the requests did: verbs per resource (with its subresource), per namespace."""
    found: dict[str, dict[str, set[str]]] = {}
    for request in requests:
        resource = request.resource.plural
        if request.subresource:
            resource = f"{resource}/{request.subresource}"
        verb = VERBS[request.action.value.lower()]
        found.setdefault(request.namespace, {}).setdefault(resource, set()).add(verb)
    return found


def test_when_time_runs_out_it_says_what_it_waited_for_and_lets_helm_go_on(
    cluster: Cluster,
) -> None:
    cluster.pod(LEARNERS_NS, "dlaas-j1-learner-1-a1", learner("j1", 1))
    now = [0.0]

    def sleep(seconds: float) -> None:  # time passes only while the hook waits
        now[0] += seconds

    said: list[str] = []
    with ThreadPoolExecutor(1) as pool:
        plan = Plan(**{**PLAN.__dict__, "timeout_s": 5.0})
        hook = start_hook(cluster, pool, said, plan, clock=lambda: now[0], sleep=sleep)
        report = hook.result(timeout=15)

    assert report.timed_out is Stage.LEARNERS
    assert report.left == ["dlaas-j1-learner-1-a1"]
    assert cluster.terminating(LEARNERS_NS) == {"dlaas-j1-learner-1-a1"}
    assert cluster.replicas("dlaas-worker") == 0
    assert cluster.replicas("dlaas-monitor") == 1  # not reached: Helm deletes it
    assert "gave up after 5 s waiting for the learners" in said[-1]


async def test_a_job_whose_learners_the_hook_stopped_resumes_at_the_next_install_without_a_restart(
    kube_ctx: Context, emulator: RunningEmulator, namespace: str
) -> None:
    lost: list[str] = []

    async def no_worker_takes_it(job_id: str, delay_s: float) -> None:
        lost.append(job_id)  # the workers are scaled to 0: the task goes with Redis

    kube_ctx.schedule_recovery = no_worker_takes_it
    job_id = await make_job(kube_ctx, "python train.py", restart_policy={"max_restarts": 0})
    await operations.deploy_job(kube_ctx, job_id)
    [pod] = pods_of(emulator, namespace, job_id)
    name = pod["metadata"]["name"]
    core = core_api(emulator.url)
    # As on a real node, the deleted pod stays until its containers ended.
    core.patch_namespaced_pod(name, namespace, {"metadata": {"finalizers": [HOLD]}})
    plan = Plan(**{**PLAN.__dict__, "namespace": "dlaas-system", "learners_namespace": namespace})
    calls = Caller(client.ApiClient(client.Configuration(host=emulator.url)), timeout=2.0)
    said: list[str] = []
    with Kubelet(emulator.url, namespace, hold=True) as kubelet:
        async with pod_watcher(kube_ctx):
            kubelet.bind(name)
            kubelet.start(name)

            async def running() -> bool:
                return (await load(kube_ctx, job_id)).state in (
                    JobState.DOWNLOADING,
                    JobState.RUNNING,
                )

            await follow(kube_ctx, running)
            hook = asyncio.create_task(
                asyncio.to_thread(Shutdown(calls, plan, poll_s=0.02, say=said.append).run)
            )

            async def deleted() -> bool:
                pods = pods_of(emulator, namespace, job_id)
                return bool(pods and pods[0]["metadata"].get("deletionTimestamp"))

            await eventually(deleted, what="the hook to delete the learner pod")
            assert not hook.done()  # its containers run still: the hook waits for them
            # SIGTERM: the runner stores its checkpoint, and its exit report says it was
            # told to stop.
            report = ExitReport(143, "SIGTERM", "stopped by SIGTERM", stopped=True)
            kubelet.finish(name, 143, message=report.to_json())

            async def interrupted() -> bool:
                return (await load(kube_ctx, job_id)).state == JobState.RECOVERING

            await follow(kube_ctx, interrupted, what="the job recorded as interrupted")
            # Nothing runs in the pod any more: the hook is done with it.
            done = await asyncio.wait_for(hook, 15)
            core.patch_namespaced_pod(name, namespace, {"metadata": {"finalizers": []}})
    calls.close()
    assert done.stopped[Stage.LEARNERS] == [name] and done.timed_out is None
    assert lost == [job_id]
    job = await load(kube_ctx, job_id)
    assert job.restarts == 0

    # The next install's reconcile finds the job RECOVERING, its task lost, and resumes it.
    await reconcile(kube_ctx)
    job = await load(kube_ctx, job_id)
    assert (job.state, job.attempt, job.restarts) == (JobState.DEPLOYING, 2, 0)
    async with kube_ctx.sessions() as session:
        [restart] = await repo.events_of_kind(session, job_id, "restart")
    assert restart.detail["failure"]["cause"] == "interrupted"
    assert "an interruption uses no restart" in restart.reason
