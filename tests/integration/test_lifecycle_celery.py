"""A real Celery worker process takes the API's nudges by task name through Redis."""

from __future__ import annotations

import asyncio
import io
import os
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from celery import Celery

from lifecycle_manager.entrypoints.wiring import open_context
from lifecycle_manager.glue.context import no_pass
from storage import jobs as repo
from storage import task_names
from storage.job_states import JobState
from storage.migrate import upgrade
from storage.users import create_user
from tests import services
from tests.integration import test_lifecycle_harness as harness
from tests.integration.test_lifecycle_harness import Agent, lm_settings

shared_agent = harness.shared_agent
agent = harness.agent


@pytest.fixture
def celery_client(private_redis_url: str) -> Iterator[Celery]:
    # A database of its own: tasks other tests queued for no worker would reach this one.
    client = Celery("dlaas-api", broker=private_redis_url, backend=private_redis_url)
    try:
        yield client
    finally:
        client.close()


def _model_zip() -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("train.py", "print('training')\n")
    return buffer.getvalue()


async def test_send_task_by_name_deploys_a_job(
    tmp_path: Path, private_redis_url: str, agent: Agent, celery_client: Celery
) -> None:
    redis_url = private_redis_url
    database_url = f"sqlite+aiosqlite:///{tmp_path / 'dlaas.db'}"
    upgrade(database_url)
    settings = lm_settings(tmp_path, database_url, redis_url, agent)
    ctx = open_context(settings)
    ctx.request_pass = no_pass  # no worker takes tasks here: the test runs passes
    try:
        async with ctx.sessions.begin() as session:
            user, _token = await create_user(session, services.unique_name("user"))
            job = await repo.create_job(
                session,
                owner_id=user.id,
                name="celery",
                learners=1,
                manifest={"learners": 1, "framework": {"command": "sleep 30"}},
            )
        ctx.objects.put_bytes(f"jobs/{job.id}/model.zip", _model_zip())

        env = {
            **os.environ,
            "DLAAS_HOME": str(settings.home),
            "DLAAS_DATABASE_URL": database_url,
            "DLAAS_REDIS_URL": redis_url,
            "DLAAS_AGENT_URL": agent.url,
            "DLAAS_AGENT_TOKEN": agent.token,
            "DLAAS_OBJECTS_DIR": str(settings.objects_dir),
        }
        worker = services.start_process(
            "worker",
            [sys.executable, "-m", "lifecycle_manager.entrypoints.worker", "--no-beat"],
            tmp_path / "worker",
            env=env,
        )
        try:
            result = celery_client.send_task(task_names.DEPLOY_JOB, args=[job.id])
            message = await asyncio.to_thread(result.get, timeout=60)
            assert message == "attempt 1: 1 of 1 learners created", worker.log_tail()
            sweep = celery_client.send_task(task_names.RECONCILE)
            assert await asyncio.to_thread(sweep.get, timeout=30) is not None
        finally:
            worker.stop()
        async with ctx.sessions() as session:
            stored = await repo.get_job_any(session, job.id)
            assert stored is not None
            assert (stored.state, stored.attempt) == (JobState.DEPLOYING, 1)
        assert [item["name"] for item in agent.learners(job.id)] == [f"dlaas-{job.id}-learner-1-a1"]
    finally:
        await ctx.aclose()
