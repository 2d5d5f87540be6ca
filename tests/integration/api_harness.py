"""Builds a real dlaas API app on a real database, Redis and object store for tests."""

from __future__ import annotations

import asyncio
import io
import secrets
import zipfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import uvicorn
from click.testing import Result
from fastapi import FastAPI
from typer.testing import CliRunner

from api.app import create_app
from cli.main import app as cli_app
from storage import cluster_nodes, jobs, queue_view
from storage.job_states import JobState
from storage.settings import Settings
from tests.services import free_port

ADMIN_TOKEN = "dlaas_test-admin-token-0123456789abcdef"

MANIFEST = b"""
name: tiny
learners: 2
memory: 1Gb
framework:
  name: pytorch
  command: python train.py
evaluation_metrics:
  type: regex
  regex: 'step (?P<step>\\d+) loss (?P<loss>[0-9.]+)'
"""


def make_zip(files: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in files.items():
            archive.writestr(name, data)
    return buffer.getvalue()


MODEL_ZIP = make_zip({"train.py": b"print('hello')\n"})


@dataclass(frozen=True, eq=False)
class ApiUser:
    name: str
    token: str
    client: httpx.AsyncClient


@dataclass
class Harness:
    app: FastAPI
    settings: Settings
    admin: httpx.AsyncClient

    def client(self, token: str | None) -> httpx.AsyncClient:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx.AsyncClient(
            transport=httpx.ASGITransport(app=self.app), base_url="http://dlaas", headers=headers
        )

    async def new_user(self, name: str) -> httpx.AsyncClient:
        """A client for a new user; names get a random suffix as databases outlive tests."""
        return (await self.add_user(name)).client

    async def add_user(self, name: str, *, admin: bool = False) -> ApiUser:
        """A new user (named `name` and a random suffix), their token and a client."""
        unique = f"{name}-{secrets.token_hex(4)}"
        response = await self.admin.post("/v2/users", json={"name": unique, "admin": admin})
        assert response.status_code == 201, response.text
        token = response.json()["token"]
        return ApiUser(unique, token, self.client(token))

    async def move_job(self, job_id: str, *states: JobState) -> None:
        """The job through `states` in turn, as the lifecycle manager would move it."""
        async with self.app.state.dlaas.sessions() as session:
            for state in states:
                moved = await jobs.transition(session, job_id, state, f"test moves to {state}")
                assert moved.changed, (job_id, state)
            await session.commit()

    async def add_team(self, name: str, members: dict[ApiUser, str]) -> str:
        """A new team (named `name` and a random suffix) with these members and roles."""
        unique = f"{name}-{secrets.token_hex(4)}"
        made = await self.admin.post("/v2/teams", json={"name": unique})
        assert made.status_code == 201, made.text
        for user, role in members.items():
            added = await self.admin.post(
                f"/v2/teams/{unique}/members", json={"user": user.name, "role": role}
            )
            assert added.status_code == 201, added.text
        return unique


async def submit(
    client: httpx.AsyncClient,
    manifest: bytes = MANIFEST,
    model: bytes = MODEL_ZIP,
    *,
    team: str | None = None,
) -> httpx.Response:
    return await client.post(
        "/v2/jobs",
        files={
            "manifest": ("manifest.yml", manifest, "application/x-yaml"),
            "model": ("model.zip", model, "application/zip"),
        },
        data={"team": team} if team is not None else None,
    )


async def calibration_job(
    api: Harness, client: httpx.AsyncClient, written: bytes | None, *, finished: bool = True
) -> str:
    """A job of `client`'s, COMPLETED unless not `finished`, whose results hold `written` as
    calibration.json (None: nothing), as `learner_image.calibrate` leaves them."""
    answer = await submit(client)
    assert answer.status_code == 201, answer.text
    job_id: str = answer.json()["id"]
    if finished:
        await api.move_job(job_id, JobState.DEPLOYING, JobState.RUNNING, JobState.COMPLETED)
    if written is not None:
        api.app.state.dlaas.objects.put_bytes(f"jobs/{job_id}/results/calibration.json", written)
    return job_id


@asynccontextmanager
async def running_api(
    database_url: str, redis_url: str, objects_dir: Path, **more_settings: Any
) -> AsyncIterator[Harness]:
    # Rate limits off unless a test asks for them (tests/integration/test_api_limits.py):
    # a test makes hundreds of requests a second from one token, far past what a user may.
    limits_off = {"rate_limit_per_s": 0.0, "address_rate_limit_per_s": 0.0}
    # Users' jobs accepted whatever the run's node agents announce in the shared Redis (one
    # that runs its programs as its own user refuses them): the refusal is tested with a
    # Redis of its own (tests/integration/test_shared_platform_warning.py).
    limits_off["allow_shared_nodes"] = True
    settings = Settings(
        home=objects_dir.parent,
        database_url=database_url,
        redis_url=redis_url,
        objects_dir=objects_dir,
        admin_token=ADMIN_TOKEN,
        **{**limits_off, **more_settings},
    )
    app = create_app(settings)
    async with app.router.lifespan_context(app):
        # What a scheduling pass of an earlier test published in the run's shared Redis
        # (its nodes refuse bigger jobs at submission) is not this platform's.
        await app.state.dlaas.redis.delete(cluster_nodes.NODES_KEY, queue_view.QUEUE_KEY)
        harness = Harness(app=app, settings=settings, admin=httpx.AsyncClient())
        harness.admin = harness.client(ADMIN_TOKEN)
        async with harness.admin:
            yield harness


@asynccontextmanager
async def served(app: FastAPI) -> AsyncIterator[int]:
    """`app` (its lifespan already entered) behind uvicorn on a free port."""
    port = free_port()
    config = uvicorn.Config(app, host="127.0.0.1", port=port, lifespan="off", log_config=None)
    server = uvicorn.Server(config)
    serving = asyncio.create_task(server.serve())
    try:
        while not server.started:
            if serving.done():
                serving.result()  # its start-up error
                raise RuntimeError("uvicorn stopped before it started")
            await asyncio.sleep(0.01)
        yield port
    finally:
        server.should_exit = True
        await serving


@dataclass
class CliOnApi:
    """The `dlaas` command against `api` served over a socket at `url` (`served`)."""

    api: Harness
    url: str

    async def dlaas(self, token: str | None, *args: str) -> Result:
        """`dlaas ARGS` as the holder of `token` (None: no token), in a thread: the API
        serves on this loop."""
        argv = [*args, "--url", self.url, *(("--token", token) if token is not None else ())]
        # wide enough that no column of a table is cut
        env = {"COLUMNS": "240", "DLAAS_TOKEN": None}
        return await asyncio.to_thread(CliRunner().invoke, cli_app, argv, env=env)
