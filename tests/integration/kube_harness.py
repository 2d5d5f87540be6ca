"""Fixtures of the Kubernetes backend tests: the API emulator, a lifecycle-manager context on
it, the pod watcher and the monitor running in the test's event loop.
"""

from __future__ import annotations

import asyncio
import secrets
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from lifecycle_manager.backends.kubernetes.client import Caller
from lifecycle_manager.backends.kubernetes.pod_events import Output, PodTracker
from lifecycle_manager.backends.kubernetes.pod_watcher import Forwarder, deliver, start_watch
from lifecycle_manager.backends.kubernetes.watch import PodWatch
from lifecycle_manager.entrypoints.monitor import CONSUMER_GROUP, Monitor
from lifecycle_manager.entrypoints.wiring import open_context
from lifecycle_manager.glue import operations
from lifecycle_manager.glue.context import Context, Timings, no_pass
from storage import jobs as repo
from storage import streams
from storage.migrate import upgrade
from storage.models import Job
from storage.settings import Settings
from storage.users import create_user
from tests import services
from tests.integration.test_lifecycle_harness import eventually
from tests.kube.emulator import RunningEmulator, running_emulator

TIMINGS = Timings(stop_wait_s=3.0, restart_grace_s=0.5, requeue_after_s=0.0, deploy_grace_s=30.0)
BIG_NODE = {"cpu": "64", "memory": "256Gi", "nvidia.com/gpu": "8", "pods": "110"}


def node(name: str, allocatable: dict[str, str], **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "spec": spec,
        "status": {
            "allocatable": allocatable,
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def core_api(url: str) -> client.CoreV1Api:
    return client.CoreV1Api(client.ApiClient(client.Configuration(host=url)))


@contextmanager
def emulator_with_a_node(*, keep_requests: bool = True) -> Iterator[RunningEmulator]:
    """The API emulator with one big node; `keep_requests=False` for long runs (see
    `tests.kube.emulator`)."""
    with running_emulator(keep_requests=keep_requests) as running:
        core_api(running.url).create_node(node("node-1", BIG_NODE))
        yield running


@pytest.fixture
def emulator() -> Iterator[RunningEmulator]:
    with emulator_with_a_node() as running:
        yield running


@pytest.fixture
def namespace() -> str:
    return services.unique_name("ns")


def kube_settings(
    tmp_path: Path,
    redis_url: str,
    emulator: RunningEmulator,
    namespace: str,
    database_url: str | None = None,
) -> Settings:
    """Settings on the emulator; the database is a new SQLite file unless one (migrated) is
    given."""
    if database_url is None:
        database_url = f"sqlite+aiosqlite:///{tmp_path / 'dlaas.db'}"
        upgrade(database_url)
    return Settings(
        home=tmp_path / "home",
        database_url=database_url,
        redis_url=redis_url,
        objects_dir=tmp_path / "objects",
        s3_access_key="key-id",
        s3_secret_key="very-secret-key",
        cluster_backend="kubernetes",
        kube_api_url=emulator.url,
        kube_namespace=namespace,
        kube_request_timeout_s=2.0,
        kube_stop_grace_s=2,
    )


@pytest.fixture
async def kube_ctx(
    tmp_path: Path, redis_url: str, emulator: RunningEmulator, namespace: str
) -> AsyncIterator[Context]:
    context = open_context(kube_settings(tmp_path, redis_url, emulator, namespace), TIMINGS)
    context.request_pass = no_pass  # no worker takes tasks here: the test runs passes
    recoveries: list[asyncio.Task[None]] = []

    async def recover_directly(job_id: str, delay_s: float) -> None:
        async def run() -> None:
            wait = delay_s
            while True:
                await asyncio.sleep(wait)
                outcome = await operations.recover_job(context, job_id)
                if outcome.retry_after is None:
                    return
                wait = outcome.retry_after

        recoveries.append(asyncio.create_task(run()))

    context.schedule_recovery = recover_directly
    try:
        yield context
    finally:
        for task in recoveries:
            task.cancel()
        await asyncio.gather(*recoveries, return_exceptions=True)
        await context.aclose()


@asynccontextmanager
async def pod_watcher(
    ctx: Context, watch_timeout_s: int = 30, pull_timeout_s: float = 300.0
) -> AsyncIterator[PodWatch]:
    """The pod watcher (`python -m lifecycle_manager.backends.kubernetes.pod_watcher`), in this
    event loop."""
    url = ctx.settings.kube_api_url
    assert url is not None
    calls = Caller(client.ApiClient(client.Configuration(host=url)), timeout=2.0)
    watcher = PodWatch(calls, ctx.settings.kube_namespace, watch_timeout_s=watch_timeout_s)
    queue: asyncio.Queue[Output] = asyncio.Queue()
    stop = threading.Event()
    forwarder = Forwarder(PodTracker(pull_timeout_s), asyncio.get_running_loop(), queue)
    start_watch(watcher, forwarder, stop)
    delivery = asyncio.create_task(deliver(queue, ctx.redis, ctx.sessions))
    try:
        yield watcher
    finally:
        stop.set()
        delivery.cancel()
        await asyncio.gather(delivery, return_exceptions=True)
        calls.close()


async def follow(
    ctx: Context, check: Callable[[], Awaitable[bool]], timeout: float = 10.0, what: str = ""
) -> None:
    """Run the monitor on the learner-event stream until `check` holds."""
    await streams.aensure_learner_group(ctx.redis, CONSUMER_GROUP)
    monitor = Monitor(ctx, f"test-{secrets.token_hex(4)}")

    async def step_then_check() -> bool:
        await monitor.step(block_ms=50)
        return await check()

    await eventually(step_then_check, timeout, what or "the job to follow its pods")


async def make_job(ctx: Context, command: str, learners: int = 1, **manifest: Any) -> str:
    body = {"learners": learners, "framework": {"command": command}, **manifest}
    async with ctx.sessions.begin() as session:
        user, _token = await create_user(session, services.unique_name("user"))
        job = await repo.create_job(
            session, owner_id=user.id, name="kube", learners=learners, manifest=body
        )
    return job.id


async def load(ctx: Context, job_id: str) -> Job:
    async with ctx.sessions() as session:
        job = await repo.get_job_any(session, job_id)
        assert job is not None
        return job


async def events(ctx: Context, job_id: str) -> list[tuple[str, str]]:
    async with ctx.sessions() as session:
        return [(e.kind, e.reason) for e in await repo.list_events(session, job_id)]


def pods_of(emulator: RunningEmulator, namespace: str, job_id: str) -> list[dict[str, Any]]:
    return sorted(
        (
            pod
            for pod in emulator.objects("pods", namespace)
            if pod["metadata"]["labels"].get("dlaas.io/job") == job_id
        ),
        key=lambda pod: str(pod["metadata"]["name"]),
    )
