"""A log flood over the Kubernetes backend keeps every line: the job goes through the real API
(in-process), its 2 learner pods run as local processes under the test kubelet against the
API emulator, with PostgreSQL, Redis and S3 (SeaweedFS) real; each learner prints metric
lines as fast as it can (`tests/e2e/flood.py`). After the end the API serves each learner's
log and metric points exactly as the programs wrote them, and a follow of the log from
the start announces every line the live view skipped, where and as many as they are, and
ends with the programs' last lines. The log and metrics objects the runners stored in S3
are whole too, so what the API serves after the end is known to come from storage.
"""

from __future__ import annotations

import asyncio
import io
import zipfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import orjson
import pytest

from api.app import create_app
from lifecycle_manager.entrypoints.wiring import open_context
from lifecycle_manager.glue import operations
from lifecycle_manager.glue.context import no_pass
from storage.job_states import FINAL_STATES, JobState
from storage.migrate import upgrade
from storage.settings import Settings
from tests import services
from tests.e2e.flood import (
    FLOOD_JOB,
    LiveView,
    check_log,
    check_metrics,
    manifest,
    stored_problems,
)
from tests.integration import kube_harness
from tests.integration.api_harness import ADMIN_TOKEN
from tests.integration.kube_harness import TIMINGS, follow, load, pod_watcher
from tests.kube.emulator import RunningEmulator
from tests.kube.kubelet import Kubelet
from tests.postgres import PostgresServer

emulator = kube_harness.emulator
namespace = kube_harness.namespace

LEARNERS = 2
LINES = 50_000  # per learner: 100,000 lines and metric points in all
TIMEOUT_S = 300.0  # bounds a wait; nothing here depends on how long anything takes


@pytest.fixture
def flood_settings(
    tmp_path: Path,
    redis_url: str,
    seaweedfs: str,
    s3_bucket: str,
    postgres_server: PostgresServer,
    emulator: RunningEmulator,
    namespace: str,
) -> Iterator[Settings]:
    name = postgres_server.create_database("dlaas_flood")
    database_url = postgres_server.url(name)
    upgrade(database_url)
    try:
        yield Settings(
            home=tmp_path / "home",
            database_url=database_url,
            redis_url=redis_url,
            object_store="s3",
            s3_endpoint_url=seaweedfs,
            s3_bucket=s3_bucket,
            s3_access_key=services.S3_ACCESS_KEY,
            s3_secret_key=services.S3_SECRET_KEY,
            s3_region=services.S3_REGION,
            admin_token=ADMIN_TOKEN,
            cluster_backend="kubernetes",
            kube_api_url=emulator.url,
            kube_namespace=namespace,
            kube_request_timeout_s=2.0,
            kube_stop_grace_s=2,
        )
    finally:
        postgres_server.drop_database(name)


def model_zip() -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.write(FLOOD_JOB / "flood.py", "flood.py")
    return buffer.getvalue()


async def test_a_flood_on_kubernetes_is_served_line_for_line_after_the_end(
    flood_settings: Settings, emulator: RunningEmulator, namespace: str, tmp_path: Path
) -> None:
    ctx = open_context(flood_settings, TIMINGS)
    ctx.request_pass = no_pass  # no worker takes tasks here: the test runs passes
    app = create_app(flood_settings)
    transport = httpx.ASGITransport(app=app)
    try:
        async with app.router.lifespan_context(app):
            admin = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
            async with httpx.AsyncClient(
                transport=transport, base_url="http://dlaas", headers=admin
            ) as client:
                created = await client.post(
                    "/v2/users", json={"name": services.unique_name("flood")}
                )
                assert created.status_code == 201, created.text
            user = {"Authorization": f"Bearer {created.json()['token']}"}
            async with httpx.AsyncClient(
                transport=transport, base_url="http://dlaas", headers=user, timeout=TIMEOUT_S
            ) as api:
                text = manifest("kube-flood", LINES, LEARNERS)
                files = {
                    "manifest": ("manifest.yml", text.encode(), "application/x-yaml"),
                    "model": ("model.zip", model_zip(), "application/zip"),
                }
                submitted = await api.post("/v2/jobs", files=files)
                assert submitted.status_code == 201, submitted.text
                job_id = str(submitted.json()["id"])

                async def finished() -> bool:
                    return (await load(ctx, job_id)).state in FINAL_STATES

                # The runners reach the job's objects through a served API's gateway.
                gateway = services.start_gateway_api(ctx.settings, tmp_path / "api")
                try:
                    with Kubelet(emulator.url, namespace, run_commands=True, workdir=tmp_path):
                        async with pod_watcher(ctx):
                            # Served whole once the job has ended (the in-process transport
                            # hands over the body at the end), read from before it starts.
                            followed = asyncio.create_task(
                                api.get(f"/v2/jobs/{job_id}/logs", params={"follow": "true"})
                            )
                            await operations.deploy_job(ctx, job_id)
                            await follow(ctx, finished, timeout=TIMEOUT_S, what="the job to end")
                            live = await followed
                finally:
                    gateway.stop()
                job = await load(ctx, job_id)
                assert job.state == JobState.COMPLETED, job.reason
                problems: list[str] = []
                for learner in range(1, LEARNERS + 1):
                    params = {"learner": str(learner)}
                    served = await api.get(f"/v2/jobs/{job_id}/logs", params=params)
                    check = check_log(learner, LINES, served.text)
                    if not check.equal:
                        problems.append(f"learner {learner}'s log: {check.first_difference}")
                    answer = await api.get(f"/v2/jobs/{job_id}/metrics", params=params)
                    points = orjson.loads(answer.content)["metrics"]
                    problems += check_metrics(learner, LINES, points)
                assert not problems, problems
                learners = range(1, LEARNERS + 1)
                stored = await asyncio.to_thread(
                    stored_problems, ctx.objects, job_id, learners, LINES
                )
                assert not stored, stored  # in S3, whole: what was served came from there
                view = LiveView(LEARNERS, LINES)
                view.feed(live.content)
                assert view.end_state == JobState.COMPLETED
                assert not view.all_problems(), view.all_problems()
                assert view.done_before_end
                print(
                    f"{job_id}: live {view.lines_seen:,} lines, {view.gap_notices} gap "
                    f"notices ({view.lines_skipped:,} lines)"
                )
    finally:
        await ctx.aclose()
