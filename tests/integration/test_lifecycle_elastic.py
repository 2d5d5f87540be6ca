"""Resizing elastic jobs in the service: a real database, Redis and node agent, a local node
with 2 pretend GPUs. A running elastic job grows into free room and shrinks for a job that
waits; a resize whose worker died after recording it is finished by the sweep; no resize
counts as a restart."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from lifecycle_manager.glue import autoscaling, operations
from lifecycle_manager.glue.context import Context
from lifecycle_manager.glue.reconcile import reconcile
from storage import jobs as repo
from storage import streams
from storage.job_states import JobState, LearnerState
from tests.integration import test_lifecycle_harness as harness
from tests.integration.test_lifecycle_harness import (
    Agent,
    eventually,
    lifecycle_context,
    lm_settings,
)
from tests.integration.test_lifecycle_operations import (
    learner_states,
    load,
    make_job,
    runner_record,
    set_job,
)
from tests.integration.test_lifecycle_operations import (
    use_fake_runner as use_fake_runner,
)

shared_agent = harness.shared_agent
agent = harness.agent
fake_runner = harness.fake_runner
database_url = harness.database_url

pytestmark = pytest.mark.usefixtures("use_fake_runner")

ELASTIC: dict[str, Any] = {
    "gpus": 1,
    "elastic": {"min_learners": 1, "max_learners": 2, "min_batch_size": 32, "max_batch_size": 128,
                "max_learner_batch_size": 64},
    "performance": {"sample_seconds": 0.001, "model_bytes": 1000},
}  # fmt: skip


@pytest.fixture
async def ctx(
    tmp_path: Path, database_url: str, redis_url: str, agent: Agent
) -> AsyncIterator[Context]:
    settings = lm_settings(
        tmp_path,
        database_url,
        redis_url,
        agent,
        local_gpus=2,
        local_gpu_product="T4",
        autoscale_interval_s=0.001,  # no settling time: each test says when to measure
        resize_cost_s=0.0,
    )
    async with lifecycle_context(settings) as context:
        yield context


async def _running(ctx: Context, command: str, learners: int) -> str:
    """An elastic job deployed at `learners` and marked RUNNING (the fake runner reports
    no progress)."""
    job = await make_job(ctx, command, learners=learners, **ELASTIC)
    assert (await operations.deploy_job(ctx, job)).message.startswith("attempt 1")
    await set_job(ctx, job, state=JobState.RUNNING.value)
    return job


async def _report_steps(ctx: Context, job_id: str, attempt: int, samples_s: float) -> None:
    """The chief's metric points of `attempt`: 10 s of steps at `samples_s` (batch 64 a
    learner), as its runner would have streamed them."""
    job = await load(ctx, job_id)
    batch = 64 * job.learners
    now = time.time()
    points = tuple(
        streams.metric_line(1, now - 10 + t, round(t * samples_s / batch), {"loss": 1.0})
        for t in range(11)
    )
    await streams.aappend_metrics(
        ctx.redis, job_id, [streams.MetricBatch(learner=1, attempt=attempt, first=0, points=points)]
    )


async def _reasons(ctx: Context, job_id: str, kind: str) -> list[str]:
    async with ctx.sessions() as session:
        return [e.reason for e in await repo.events_of_kind(session, job_id, kind)]


async def test_a_resize_recorded_by_a_worker_that_died_is_finished_by_the_sweep(
    ctx: Context, agent: Agent
) -> None:
    job = await _running(ctx, "sleep 60", learners=1)
    await _report_steps(ctx, job, attempt=1, samples_s=640.0)

    # The worker records the growth into the free GPU, then dies before stopping anything.
    assert await autoscaling.autoscale_pass(ctx, ()) == [(job, 1)]
    row = await load(ctx, job)
    assert (row.state, row.learners, row.restarts) == (JobState.RESCALING, 2, 0)
    assert {state for _, state in (await learner_states(ctx, job)).values()} == {
        LearnerState.STOPPING.value
    }
    [why] = await _reasons(ctx, job, "resizing")
    assert why.startswith("grows from 1 to 2 learners (global batch 64 -> 128)"), why

    async def deployed_again() -> bool:
        await reconcile(ctx)
        return (await load(ctx, job)).state == JobState.DEPLOYING

    await eventually(deployed_again, 30, "the sweep to finish the resize")
    row = await load(ctx, job)
    assert (row.attempt, row.learners, row.restarts) == (2, 2, 0)
    assert set(await learner_states(ctx, job)) == {1, 2}
    env = runner_record(agent, job, 2, attempt=2)["env"]
    assert (env["NUM_LEARNERS"], env["DLAAS_GLOBAL_BATCH_SIZE"], env["DLAAS_BATCH_SIZE"]) == (
        "2",
        "128",
        "64",
    )
    # sized already and not measured at its new size: the next pass leaves it alone
    await set_job(ctx, job, state=JobState.RUNNING.value)
    assert await autoscaling.autoscale_pass(ctx, ()) == []


async def test_a_grown_job_shrinks_so_that_a_waiting_job_starts(ctx: Context, agent: Agent) -> None:
    elastic = await _running(ctx, "sleep 60", learners=2)
    await _report_steps(ctx, elastic, attempt=1, samples_s=1200.0)
    waiting = await make_job(ctx, "sleep 60", learners=1, gpus=1)

    outcome = await operations.deploy_job(ctx, waiting)  # no room: the pass shrinks the other
    assert outcome.message.startswith("queued"), outcome
    row = await load(ctx, elastic)
    assert (row.state, row.learners, row.attempt, row.restarts) == (JobState.DEPLOYING, 1, 2, 0)
    [why] = await _reasons(ctx, elastic, "resizing")
    assert why.startswith("shrinks from 2 to 1 learner "), why

    await operations.schedule_jobs(ctx)  # the next pass admits the waiting job
    assert (await load(ctx, waiting)).state == JobState.DEPLOYING
    env = runner_record(agent, elastic, 1, attempt=2)["env"]
    assert (env["NUM_LEARNERS"], env["DLAAS_GLOBAL_BATCH_SIZE"]) == ("1", "64")
