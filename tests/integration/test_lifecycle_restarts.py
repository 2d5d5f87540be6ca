"""Restarts under the manifest's restart_policy, with a real node agent and database."""

from __future__ import annotations

import asyncio
import secrets
import time
from datetime import timedelta

import httpx
import pytest

from lifecycle_manager.entrypoints.monitor import CONSUMER_GROUP, Monitor
from lifecycle_manager.glue import operations
from lifecycle_manager.glue.context import Context
from lifecycle_manager.glue.heartbeats import check_heartbeats
from storage import jobs as repo
from storage import streams
from storage.job_states import JobState, LearnerState
from tests.integration import test_lifecycle_harness as harness
from tests.integration.test_lifecycle_harness import Agent
from tests.integration.test_lifecycle_operations import (
    event_kinds,
    is_state,
    learner_states,
    load,
    make_job,
    watch,
)
from tests.integration.test_lifecycle_operations import (
    use_fake_runner as use_fake_runner,
)

shared_agent = harness.shared_agent
agent = harness.agent
fake_runner = harness.fake_runner
database_url = harness.database_url
ctx = harness.ctx

pytestmark = pytest.mark.usefixtures("use_fake_runner")


async def _restart_details(ctx: Context, job_id: str) -> list[dict[str, object]]:
    async with ctx.sessions() as session:
        return [e.detail for e in await repo.events_of_kind(session, job_id, "restart")]


async def test_a_failed_learner_restarts_the_gang_which_then_completes(
    ctx: Context, agent: Agent
) -> None:
    command = 'if [ "$DLAAS_ATTEMPT" = 1 ] && [ "$LEARNER_ID" = 2 ]; then exit 7; fi; sleep 0.3'
    job_id = await make_job(ctx, command, learners=2)
    await operations.deploy_job(ctx, job_id)
    await watch(ctx, is_state(ctx, job_id, JobState.COMPLETED), timeout=30)
    job = await load(ctx, job_id)
    assert (job.attempt, job.restarts) == (2, 1)
    assert await learner_states(ctx, job_id) == {
        1: (2, LearnerState.SUCCEEDED.value),
        2: (2, LearnerState.SUCCEEDED.value),
    }
    [detail] = await _restart_details(ctx, job_id)
    failure = detail["failure"]
    assert isinstance(failure, dict)
    assert (failure["learner"], failure["cause"], failure["exit_code"]) == (2, "exit", 7)
    kinds = await event_kinds(ctx, job_id)
    assert kinds.index("restart") < kinds.index("state", kinds.index("restart"))


async def test_the_same_error_twice_fails_the_job_instead_of_burning_restarts(
    ctx: Context, agent: Agent
) -> None:
    job_id = await make_job(ctx, "echo 'SyntaxError: invalid syntax'; exit 1")
    await operations.deploy_job(ctx, job_id)
    await watch(ctx, is_state(ctx, job_id, JobState.FAILED), timeout=30)
    job = await load(ctx, job_id)
    assert job.restarts == 1
    assert "same failure happened 2 times" in job.reason
    assert "restart_refused" in await event_kinds(ctx, job_id)


async def test_restarts_run_out_after_max_restarts(ctx: Context, agent: Agent) -> None:
    job_id = await make_job(ctx, "kill -9 $$", restart_policy={"max_restarts": 2, "backoff_s": 0.1})
    await operations.deploy_job(ctx, job_id)
    await watch(ctx, is_state(ctx, job_id, JobState.FAILED), timeout=40)
    job = await load(ctx, job_id)
    assert job.restarts == 2
    assert job.attempt == 3
    assert "no restarts left (2 of 2 used)" in job.reason
    assert len(await _restart_details(ctx, job_id)) == 2


async def test_a_silent_learner_is_failed_and_restarted(ctx: Context, agent: Agent) -> None:
    job_id = await make_job(
        ctx, "sleep 60", restart_policy={"heartbeat_timeout_s": 2, "max_restarts": 1}
    )
    await operations.deploy_job(ctx, job_id)
    async with ctx.sessions.begin() as session:  # what the runner's status events say
        await repo.set_learner_state(session, job_id, 1, 1, LearnerState.RUNNING.value)
        await repo.transition(session, job_id, JobState.RUNNING, "training")
    await streams.aset_heartbeat(ctx.redis, job_id, 1, time.time() - 10)
    assert await check_heartbeats(ctx) == []  # its last status change was a sign of life
    real_clock = ctx.clock
    ctx.clock = lambda: real_clock() + timedelta(seconds=2.2)  # past the 2 s timeout
    assert await check_heartbeats(ctx) == [job_id]
    ctx.clock = real_clock
    [detail] = await _restart_details(ctx, job_id)
    failure = detail["failure"]
    assert isinstance(failure, dict)
    assert failure["cause"] == "heartbeat"
    assert "no heartbeat for" in str(failure["reason"])

    async def next_attempt_deployed() -> bool:
        return (await load(ctx, job_id)).attempt == 2

    await watch(ctx, next_attempt_deployed, timeout=20)
    assert [item["attempt"] for item in agent.learners(job_id)] == [2]


async def test_a_learner_stopped_while_the_job_should_run_resumes_without_a_restart(
    ctx: Context, agent: Agent
) -> None:
    job_id = await make_job(ctx, "sleep 30", restart_policy={"max_restarts": 0})
    await operations.deploy_job(ctx, job_id)
    # Stopped through its agent on a request that was not the lifecycle manager's, as
    # `dlaas down` stops every learner.
    await asyncio.to_thread(
        httpx.delete,
        f"{agent.url}/jobs/{job_id}",
        params={"wait": 10},
        headers=agent.headers,
        timeout=15,
    )

    async def next_attempt_deployed() -> bool:
        return (await load(ctx, job_id)).attempt == 2

    await watch(ctx, next_attempt_deployed, timeout=20)
    [detail] = await _restart_details(ctx, job_id)
    failure = detail["failure"]
    assert isinstance(failure, dict)
    assert failure["cause"] == "interrupted"
    async with ctx.sessions() as session:
        [restart] = await repo.events_of_kind(session, job_id, "restart")
    assert "an interruption uses no restart" in restart.reason
    assert (await load(ctx, job_id)).restarts == 0


async def test_a_monitor_told_to_stop_first_handles_what_its_learners_reported(
    ctx: Context, agent: Agent
) -> None:
    job_id = await make_job(ctx, "sleep 30", restart_policy={"max_restarts": 0})
    await operations.deploy_job(ctx, job_id)
    await streams.aensure_learner_group(ctx.redis, CONSUMER_GROUP)
    await asyncio.to_thread(
        httpx.delete,
        f"{agent.url}/jobs/{job_id}",
        params={"wait": 10},
        headers=agent.headers,
        timeout=15,
    )
    stop = asyncio.Event()
    stop.set()  # as `dlaas down` stops the monitor right after the learners
    await Monitor(ctx, f"test-{secrets.token_hex(4)}").run(stop)
    [detail] = await _restart_details(ctx, job_id)
    failure = detail["failure"]
    assert isinstance(failure, dict)
    assert failure["cause"] == "interrupted"
