"""Shared pieces of the lifecycle-manager tests: a real node agent, a fake runner, contexts.

The fixtures here are imported by the `test_lifecycle_*` modules that use them.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from lifecycle_manager.entrypoints.wiring import open_context
from lifecycle_manager.glue import operations
from lifecycle_manager.glue.context import Context, Timings, no_pass
from storage.migrate import upgrade
from storage.settings import Settings
from tests import services
from tests.postgres import PostgresServer
from tests.services import ServiceProcess

AGENT_GRACE_S = 1.0

# Stands in for `dlaas-learner`: records its command line and environment in its working
# directory, then runs the user's command the way the runner does (sh -c).
FAKE_RUNNER = f"""#!{sys.executable} -S
import json, os, subprocess, sys
args = sys.argv[1:]
cut = args.index("--")
with open("runner.json.tmp", "w") as out:
    json.dump({{"argv": args[:cut], "env": dict(os.environ)}}, out)
os.replace("runner.json.tmp", "runner.json")
sys.exit(subprocess.call(["/bin/sh", "-c", args[cut + 1]]))
"""


@dataclass
class Agent:
    url: str
    root: Path
    process: ServiceProcess
    token: str
    # A client of the agent that sends its token (paths relative to `url`).
    http: httpx.Client = field(init=False)

    def __post_init__(self) -> None:
        self.http = httpx.Client(base_url=self.url, headers=self.headers, timeout=10)

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}

    def learners(self, job: str | None = None) -> list[dict[str, object]]:
        params = {"job": job} if job else {}
        items: list[dict[str, object]] = self.http.get("/learners", params=params).json()[
            "learners"
        ]
        return items

    def delete_all(self) -> None:
        for job in {str(item["job"]) for item in self.learners()}:
            self.http.delete(f"/jobs/{job}", params={"wait": 10}, timeout=15)


def start_agent(
    root: Path, redis_url: str, port: int | None = None, token: str | None = None
) -> Agent:
    """A node agent on `port` (a free one by default) requiring `token` (a new one)."""
    port = port or services.free_port()
    token = token or secrets.token_urlsafe(32)
    env = {
        **os.environ,
        "DLAAS_REDIS_URL": redis_url,
        "DLAAS_AGENT_TOKEN": token,
        "DLAAS_PROBE_SECRET": "agent-only",
        # The agent's own mechanics, its programs as its user: giving them uids of their
        # own is tested in tests/unit/test_program_identity.py and tests/e2e.
        "DLAAS_AGENT_ISOLATION": "off",
    }
    argv = [
        sys.executable, "-m", "lifecycle_manager.backends.local.node_agent", "--port", str(port),
        "--root", str(root), "--grace", str(AGENT_GRACE_S),
    ]  # fmt: skip
    process = services.start_process("agent", argv, root.parent / f"agent-{port}", env=env)
    agent = Agent(f"http://127.0.0.1:{port}", root, process, token)
    services.wait_until(
        lambda: agent.http.get("/healthz").status_code == 200, process, 30, "healthz"
    )
    return agent


@pytest.fixture(scope="session")
def shared_agent(tmp_path_factory: pytest.TempPathFactory, redis_url: str) -> Iterator[Agent]:
    agent = start_agent(tmp_path_factory.mktemp("agent") / "root", redis_url)
    try:
        yield agent
    finally:
        agent.delete_all()
        agent.process.stop()
        agent.http.close()


@pytest.fixture
def agent(shared_agent: Agent) -> Iterator[Agent]:
    """The shared agent, emptied of learners after the test."""
    yield shared_agent
    shared_agent.delete_all()


@pytest.fixture(scope="session")
def fake_runner(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("runner") / "fake-dlaas-learner"
    path.write_text(FAKE_RUNNER)
    path.chmod(0o755)
    return str(path)


@pytest.fixture(params=["sqlite", "postgres"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A fresh, migrated database per test (PostgreSQL: a database of its own)."""
    if request.param == "sqlite":
        url = f"sqlite+aiosqlite:///{tmp_path / 'dlaas.db'}"
        upgrade(url)
        yield url
        return
    server: PostgresServer = request.getfixturevalue("postgres_server")
    name = server.create_database("dlaas_lm")
    url = server.url(name)
    upgrade(url)
    try:
        yield url
    finally:
        server.drop_database(name)


def lm_settings(
    tmp_path: Path, database_url: str, redis_url: str, agent: Agent, **more: Any
) -> Settings:
    """The lifecycle manager's settings for a test. The local node is given room for many
    jobs unless a test says otherwise: tests share the machine's two CPUs."""
    capacity: dict[str, Any] = {"local_cpus": 256, "local_memory": 1 << 40}
    return Settings(
        home=tmp_path / "home",
        database_url=database_url,
        redis_url=redis_url,
        agent_url=agent.url,
        agent_token=agent.token,
        objects_dir=tmp_path / "objects",
        **{**capacity, **more},
    )


TEST_TIMINGS = Timings(stop_wait_s=5.0, requeue_after_s=0.0, deploy_grace_s=30.0)


@asynccontextmanager
async def lifecycle_context(settings: Settings) -> AsyncIterator[Context]:
    """A `Context` on `settings` whose restarts run in this test's event loop."""
    context = open_context(settings, TEST_TIMINGS)
    context.request_pass = no_pass  # no worker takes tasks here: the test runs passes
    recoveries: list[asyncio.Task[None]] = []

    async def recover_directly(job_id: str, delay_s: float) -> None:
        """What a Celery worker does with `dlaas.recover_job`, in this test's event loop."""

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


@pytest.fixture
async def ctx(
    tmp_path: Path, database_url: str, redis_url: str, agent: Agent
) -> AsyncIterator[Context]:
    async with lifecycle_context(lm_settings(tmp_path, database_url, redis_url, agent)) as context:
        yield context


async def eventually(
    check: Callable[[], Awaitable[bool]], timeout: float = 10.0, what: str = "condition"
) -> None:
    deadline = time.monotonic() + timeout
    while not await check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        await asyncio.sleep(0.05)
