"""The kubernetes backend's control-plane speed against kmock's API emulator over HTTP.

    .venv/bin/python -m bench.k8s_control [--jobs N] [--transitions N]

What it starts: the API emulator as a process of its own (`python -m tests.kube.emulator`,
so its CPU is not dlaas's), an empty Redis database (`bench/_bench_redis.py`), a SQLite
database in a temporary directory. Then, in this process, the lifecycle manager's pieces as
the services run them: the backend, the pod watcher (list-then-watch thread and delivery),
and the monitor reading the learner-event stream.

Figures (the FINAL line is one JSON object):
- `create_16_learners_s`: the backend's `create_learners` for a 16-learner job (gang
  admission, Secret, Service and 16 pods), median wall time over `--jobs` jobs; `_max`,
  and `create_16_learners_cpu_s`, this process's CPU time for it (dlaas's own work).
  Baseline in the same run: `bare_client_16_pods_s`, 16 pods created one after the other
  with the bare client, no dlaas. Target: under 1 s.
- `phase_to_state_p95_s` (and `_p50`, `_max`): from the moment a test-side kubelet patches
  a pod's phase (Running, then Succeeded) to the moment the job's row shows the state it
  implies (DOWNLOADING, then COMPLETED), over `--transitions` single-learner jobs x 2; the
  database is polled every 5 ms. Target: under 1 s.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bench._bench_redis import BenchRedis
from bench._latency_stats import median, percentile, rounded
from bench._small import parse_with_small

ROOT = Path(__file__).resolve().parents[1]
TARGET_CREATE_S = 1.0
TARGET_PHASE_S = 1.0
POLL_S = 0.005
NODE = "bench-node"


def progress(message: str) -> None:
    print(f"[k8s_control] {message}", flush=True)


@contextmanager
def emulator_process() -> Iterator[tuple[str, subprocess.Popen[str]]]:
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.kube.emulator"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline().strip()
        if not line.startswith("READY "):
            raise RuntimeError(f"the emulator did not start: {line!r}")
        yield line.split(" ", 1)[1], process
    finally:
        process.terminate()
        process.wait(10)


def process_cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def own_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def add_node(url: str) -> None:
    """A node with room for every job, labelled as a kubelet labels its node: the scheduler
    places each learner on a node by that label."""
    from kubernetes import client

    from lifecycle_manager.backends.kubernetes.manifests import HOSTNAME_LABEL

    core = client.CoreV1Api(client.ApiClient(client.Configuration(host=url)))
    core.create_node(
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": NODE, "labels": {HOSTNAME_LABEL: NODE}},
            "status": {
                "allocatable": {"cpu": "512", "memory": "4Ti", "nvidia.com/gpu": "64"},
                "conditions": [{"type": "Ready", "status": "True"}],
            },
        }
    )


def bare_client_baseline(url: str) -> float:
    from kubernetes import client

    core = client.CoreV1Api(client.ApiClient(client.Configuration(host=url)))
    start = time.perf_counter()
    for n in range(16):
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": f"bare-{n}", "namespace": "bench-bare"},
            "spec": {"containers": [{"name": "c", "image": "busybox"}]},
        }
        core.create_namespaced_pod("bench-bare", pod, _preload_content=False)
    return time.perf_counter() - start


async def measure_creates(url: str, jobs: int) -> dict[str, Any]:
    from kubernetes import client

    from lifecycle_manager.backends.base import LearnerSpec, Resources
    from lifecycle_manager.backends.kubernetes import KubernetesBackend
    from lifecycle_manager.backends.kubernetes.manifests import PodOptions

    backend = KubernetesBackend(
        client.ApiClient(client.Configuration(host=url)), PodOptions(namespace="bench-create")
    )
    walls, cpus = [], []
    env = {"DLAAS_S3_SECRET_KEY": "s", "DLAAS_REDIS_URL": "redis://r:6379/0", "LR": "0.1"}
    for job in range(jobs + 1):
        job_id = f"training-bench{job:04d}"
        specs = [
            LearnerSpec(
                job_id,
                n,
                1,
                16,
                ["dlaas-learner", "--", "true"],
                env,
                resources=Resources(1, 2**30, 1),
            )
            for n in range(1, 17)
        ]
        cpu0, wall0 = own_cpu_s(), time.perf_counter()
        created = await backend.create_learners(specs)
        wall, cpu = time.perf_counter() - wall0, own_cpu_s() - cpu0
        assert len(created) == 16, created
        await backend.delete_learners(job_id)  # so that the next gang finds room
        if job:  # the first one warms the client's connections up
            walls.append(wall)
            cpus.append(cpu)
    await backend.aclose()
    return {
        "create_16_learners_s": rounded(median(walls)),
        "create_16_learners_max_s": rounded(max(walls)),
        "create_16_learners_cpu_s": rounded(median(cpus)),
        "create_jobs": jobs,
    }


async def measure_phases(url: str, redis_url: str, home: Path, transitions: int) -> dict[str, Any]:
    from kubernetes import client

    from lifecycle_manager.backends.kubernetes.client import Caller
    from lifecycle_manager.backends.kubernetes.pod_events import Output, PodTracker
    from lifecycle_manager.backends.kubernetes.pod_watcher import Forwarder, deliver, start_watch
    from lifecycle_manager.backends.kubernetes.watch import PodWatch
    from lifecycle_manager.entrypoints.monitor import CONSUMER_GROUP, Monitor
    from lifecycle_manager.entrypoints.wiring import open_context
    from lifecycle_manager.glue import operations
    from storage import jobs as repo
    from storage import streams
    from storage.job_states import JobState
    from storage.migrate import upgrade
    from storage.settings import Settings
    from storage.users import create_user

    namespace = "bench-phases"
    database_url = f"sqlite+aiosqlite:///{home / 'dlaas.db'}"
    upgrade(database_url)
    settings = Settings(
        home=home,
        database_url=database_url,
        redis_url=redis_url,
        objects_dir=home / "objects",
        cluster_backend="kubernetes",
        kube_api_url=url,
        kube_namespace=namespace,
    )
    ctx = open_context(settings)
    core = client.CoreV1Api(client.ApiClient(client.Configuration(host=url)))
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[Output] = asyncio.Queue()
    stop = threading.Event()
    watcher = PodWatch(Caller(client.ApiClient(client.Configuration(host=url))), namespace)
    start_watch(watcher, Forwarder(PodTracker(), loop, queue), stop)
    delivery = asyncio.create_task(deliver(queue, ctx.redis, ctx.sessions))
    await streams.aensure_learner_group(ctx.redis, CONSUMER_GROUP, "$")
    monitor_stop = asyncio.Event()
    monitor = asyncio.create_task(Monitor(ctx, "bench-monitor").run(monitor_stop))

    async with ctx.sessions.begin() as session:
        user, _token = await create_user(session, "bench")

    async def wait_for(job_id: str, state: JobState, since: float) -> float:
        deadline = since + 10
        while time.perf_counter() < deadline:
            async with ctx.sessions() as session:
                job = await repo.get_job_any(session, job_id)
            if job is not None and job.state == state:
                return time.perf_counter() - since
            await asyncio.sleep(POLL_S)
        raise TimeoutError(f"{job_id} never reached {state}")

    def patch(name: str, status: dict[str, Any]) -> float:
        started = time.perf_counter()
        core.patch_namespaced_pod_status(
            name, namespace, {"status": status}, _preload_content=False
        ).release_conn()
        return started

    latencies: list[float] = []
    for n in range(transitions):
        async with ctx.sessions.begin() as session:
            job = await repo.create_job(
                session,
                owner_id=user.id,
                name=f"bench-{n}",
                learners=1,
                manifest={"learners": 1, "framework": {"command": "true"}},
            )
        outcome = await operations.deploy_job(ctx, job.id)
        async with ctx.sessions() as session:
            deployed = await repo.get_job_any(session, job.id)
        if deployed is None or deployed.state != JobState.DEPLOYING:
            raise RuntimeError(f"{job.id} was not deployed: {outcome.message}")
        name = f"dlaas-{job.id}-learner-1-a1"
        running = {"state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}}}
        since = await asyncio.to_thread(
            patch, name, {"phase": "Running", "containerStatuses": [{"name": "shipper", **running}]}
        )
        latencies.append(await wait_for(job.id, JobState.DOWNLOADING, since))
        done = {"state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}
        since = await asyncio.to_thread(
            patch, name, {"phase": "Succeeded", "containerStatuses": [{"name": "shipper", **done}]}
        )
        latencies.append(await wait_for(job.id, JobState.COMPLETED, since))
    stop.set()
    monitor_stop.set()
    await asyncio.wait_for(monitor, 5)
    delivery.cancel()
    await ctx.aclose()
    return {
        "phase_to_state_p50_s": rounded(percentile(latencies, 50)),
        "phase_to_state_p95_s": rounded(percentile(latencies, 95)),
        "phase_to_state_max_s": rounded(max(latencies)),
        "phase_transitions": len(latencies),
    }


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.k8s_control")
    parser.add_argument("--jobs", type=int, default=10, help="16-learner jobs to create")
    parser.add_argument("--transitions", type=int, default=20, help="1-learner jobs to drive")
    args = parse_with_small(parser, {"jobs": 1, "transitions": 2})
    figures: dict[str, Any] = {"bench": "k8s_control"}
    with emulator_process() as (url, process), BenchRedis() as redis_server:
        progress(f"emulator at {url}; Redis {redis_server.where or redis_server.url}")
        add_node(url)
        figures["bare_client_16_pods_s"] = rounded(bare_client_baseline(url))
        emulator_cpu0 = process_cpu_s(process.pid)
        figures.update(asyncio.run(measure_creates(url, args.jobs)))
        figures["emulator_cpu_s_during_creates"] = rounded(
            process_cpu_s(process.pid) - emulator_cpu0
        )
        progress(f"creates: {figures['create_16_learners_s']} s median")
        with tempfile.TemporaryDirectory(prefix="dlaas-bench-k8s-") as home:
            figures.update(
                asyncio.run(measure_phases(url, redis_server.url, Path(home), args.transitions))
            )
        progress(f"phase to state: {figures['phase_to_state_p95_s']} s p95")
    figures["target_create_16_learners_s"] = TARGET_CREATE_S
    figures["target_phase_to_state_p95_s"] = TARGET_PHASE_S
    figures["machine_cores"] = os.cpu_count()
    print(json.dumps(figures), flush=True)


if __name__ == "__main__":
    main()
