"""The scheduling pass in the service: a real database, Redis and node agent, a local node
with 2 pretend GPUs. Jobs that do not fit wait QUEUED with their reason and their place in
the published queue, and start when room frees; a higher-priority job preempts a running
one, which is asked to stop, requeued without using a restart, and deployed again later.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from lifecycle_manager.glue import operations, scheduling_pass
from lifecycle_manager.glue.context import Context
from lifecycle_manager.glue.reconcile import reconcile
from storage import cluster_nodes, queue_view
from storage import jobs as repo
from storage.job_states import Desired, JobState, LearnerState
from storage.users import create_user
from tests import services
from tests.integration import test_lifecycle_harness as harness
from tests.integration.test_lifecycle_harness import Agent, lifecycle_context, lm_settings
from tests.integration.test_lifecycle_operations import (
    is_state,
    learner_states,
    load,
    make_job,
    set_job,
    watch,
)
from tests.integration.test_lifecycle_operations import (
    use_fake_runner as use_fake_runner,
)

shared_agent = harness.shared_agent
agent = harness.agent
fake_runner = harness.fake_runner
database_url = harness.database_url

pytestmark = pytest.mark.usefixtures("use_fake_runner")


@pytest.fixture
async def ctx(
    tmp_path: Path, database_url: str, redis_url: str, agent: Agent
) -> AsyncIterator[Context]:
    settings = lm_settings(
        tmp_path, database_url, redis_url, agent, local_gpus=2, local_gpu_product="T4"
    )
    async with lifecycle_context(settings) as context:
        yield context


async def _user(ctx: Context) -> int:
    async with ctx.sessions.begin() as session:
        user, _token = await create_user(session, services.unique_name("user"))
        return user.id


async def _job(ctx: Context, owner_id: int, **manifest: Any) -> str:
    """A job in its owner's own team (priorities order the jobs of one team)."""
    body = {"framework": {"command": "sleep 60"}, **manifest}
    async with ctx.sessions.begin() as session:
        job = await repo.create_job(
            session, owner_id=owner_id, name="test", learners=body["learners"], manifest=body
        )
        return job.id


async def _events(ctx: Context, job_id: str, kind: str) -> list[str]:
    async with ctx.sessions() as session:
        return [e.reason for e in await repo.events_of_kind(session, job_id, kind)]


async def test_a_job_that_does_not_fit_waits_with_its_reason_and_starts_when_room_frees(
    ctx: Context, agent: Agent
) -> None:
    first = await make_job(ctx, "sleep 60", gpus=2)
    assert (await operations.deploy_job(ctx, first)).message.startswith("attempt 1")
    nodes = await cluster_nodes.anodes(ctx.redis)
    assert nodes is not None and [(n.gpus, n.gpu_product) for n in nodes] == [(2, "T4")]

    second = await make_job(ctx, "sleep 60", gpus=1)
    outcome = await operations.deploy_job(ctx, second)
    assert outcome.message.startswith("queued, position 1: ") and outcome.retry_after is None
    job = await load(ctx, second)
    assert job.state == JobState.QUEUED and "GPU" in job.reason, job.reason
    assert await _events(ctx, second, "waiting") == [job.reason]
    queue = await queue_view.aread_queue(ctx.redis)
    assert queue is not None and [(q.job_id, q.position) for q in queue.jobs] == [(second, 1)]

    # Another pass on the same facts says nothing new.
    await operations.schedule_jobs(ctx)
    assert await _events(ctx, second, "waiting") == [job.reason]

    await set_job(ctx, first, desired=Desired.HALT.value)
    assert (await operations.halt_job(ctx, first)).message == "halted"
    await reconcile(ctx)  # the sweep's pass admits what the halt made room for
    assert (await load(ctx, second)).state == JobState.DEPLOYING
    [admitted] = await _events(ctx, second, "admitted")
    assert admitted.startswith("admitted on local"), admitted
    queue = await queue_view.aread_queue(ctx.redis)
    assert queue is not None and queue.jobs == []


async def test_a_higher_priority_job_preempts_one_that_requeues_without_a_restart(
    ctx: Context, agent: Agent
) -> None:
    owner = await _user(ctx)
    low = await _job(ctx, owner, learners=2, gpus=1, priority=-1)
    await operations.deploy_job(ctx, low)
    assert (await load(ctx, low)).state == JobState.DEPLOYING
    high = await _job(ctx, owner, learners=1, gpus=2)

    outcome = await operations.deploy_job(ctx, high)
    assert "queued" in outcome.message and "preempt" in outcome.message, outcome
    [asked] = await _events(ctx, low, "preempting")
    assert high in asked, asked
    assert set(await learner_states(ctx, low)) == {1, 2}
    assert {state for _, state in (await learner_states(ctx, low)).values()} == {
        LearnerState.STOPPING.value
    }

    # The learners got SIGTERM; once gone, the sweep requeues the job and the pass that
    # follows admits the job it made room for.
    async def low_requeued() -> bool:
        await reconcile(ctx)
        return (await load(ctx, low)).state == JobState.QUEUED

    await watch(ctx, low_requeued, timeout=30)
    job = await load(ctx, low)
    assert (job.restarts, job.attempt) == (0, 1)
    [preempted] = await _events(ctx, low, "preempted")
    assert preempted.startswith("preempted: ") and high in preempted, preempted
    assert "resumes from" in preempted or "starts over" in preempted, preempted
    await watch(ctx, is_state(ctx, high, JobState.DEPLOYING), timeout=30)
    assert (await load(ctx, low)).state == JobState.QUEUED  # waits for the room it gave

    await set_job(ctx, high, desired=Desired.HALT.value)
    await operations.halt_job(ctx, high)
    await reconcile(ctx)
    job = await load(ctx, low)
    assert (job.state, job.attempt, job.restarts) == (JobState.DEPLOYING, 2, 0)


async def test_a_job_admitted_whose_deploy_was_lost_is_deployed_by_the_sweep(
    ctx: Context, agent: Agent
) -> None:
    job_id = await make_job(ctx, "sleep 60", gpus=1)
    # The pass records the admission; the worker that was to deploy it dies right after.
    recorded = await scheduling_pass.run_pass(ctx)
    assert recorded is not None and [a.job_id for a in recorded.decided.admissions] == [job_id]
    assert (await load(ctx, job_id)).state == JobState.QUEUED

    report = await reconcile(ctx)
    assert job_id in report.deployed, report
    job = await load(ctx, job_id)
    assert (job.state, job.attempt) == (JobState.DEPLOYING, 1)
    assert len(await _events(ctx, job_id, "admitted")) == 1  # deployed, not admitted again


async def test_the_sweep_publishes_the_nodes_when_nothing_is_queued(
    ctx: Context, agent: Agent
) -> None:
    """A platform restarted with other capacity is not judged by what was published before."""
    stale = [cluster_nodes.NodeCapacity("local", millicpus=2000, memory=1 << 30)]
    await cluster_nodes.apublish_nodes(ctx.redis, stale)
    await reconcile(ctx)  # published just now: left as it is
    assert await cluster_nodes.anodes(ctx.redis) == stale

    await ctx.redis.delete(cluster_nodes.FRESH_KEY)  # as if REFRESH_S had passed
    await reconcile(ctx)
    nodes = await cluster_nodes.anodes(ctx.redis)
    assert nodes is not None and [(n.gpus, n.gpu_product) for n in nodes] == [(2, "T4")]
