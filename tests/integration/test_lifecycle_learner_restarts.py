"""`restart_policy.scope: learner`: a failed learner restarts alone, the others run on.

A real node agent, database and event stream; the learners are the fake runner's shell
commands, which read `DLAAS_ATTEMPT` and `LEARNER_ID` to fail once.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from lifecycle_manager.glue import operations
from lifecycle_manager.glue.context import Context
from lifecycle_manager.glue.reconcile import reconcile
from storage import jobs as repo
from storage import streams
from storage.job_states import JobState, LearnerState
from tests.integration import test_lifecycle_harness as harness
from tests.integration.test_lifecycle_harness import Agent
from tests.integration.test_lifecycle_operations import (
    drain,
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
ctx = harness.ctx

pytestmark = pytest.mark.usefixtures("use_fake_runner")

LEARNER_SCOPE = {"scope": "learner", "backoff_s": 0.1}
# Learner 2 fails in attempt 1; every learner otherwise runs for `sleep` seconds.
FAIL_LEARNER_2_ONCE = (
    'if [ "$DLAAS_ATTEMPT" = 1 ] && [ "$LEARNER_ID" = 2 ]; then exit 7; fi; sleep {sleep}'
)


def _running(agent: Agent, job_id: str) -> dict[int, dict[str, Any]]:
    """The job's running learners as the agent lists them, by learner index."""
    return {
        int(str(item["learner"])): item
        for item in agent.learners(job_id)
        if item["phase"] == "Running"
    }


def _runs(agent: Agent, job_id: str, *learners: int) -> Callable[[], Awaitable[bool]]:
    """Whether exactly these learners of the job run."""

    async def check() -> bool:
        return sorted(_running(agent, job_id)) == sorted(learners)

    return check


async def _restarted(ctx: Context, job_id: str) -> bool:
    return (await learner_states(ctx, job_id)).get(2, (0, ""))[0] == 2


async def _deployed_until_learner_2_restarted(ctx: Context, sleep: float) -> str:
    """A 2-learner scope-learner job whose learner 2 failed once and was created again."""
    job_id = await make_job(
        ctx, FAIL_LEARNER_2_ONCE.format(sleep=sleep), learners=2, restart_policy=LEARNER_SCOPE
    )
    await operations.deploy_job(ctx, job_id)
    await watch(ctx, lambda: _restarted(ctx, job_id), timeout=20)
    return job_id


async def test_only_the_failed_learner_restarts_and_the_job_completes(
    ctx: Context, agent: Agent
) -> None:
    job_id = await _deployed_until_learner_2_restarted(ctx, sleep=3)
    first = _running(agent, job_id)[1]
    assert first["attempt"] == 1
    await harness.eventually(_runs(agent, job_id, 1, 2), 10, "learner 2 to run again")
    running = _running(agent, job_id)
    assert (running[1]["pid"], running[1]["attempt"]) == (first["pid"], 1)  # untouched
    assert running[2]["attempt"] == 2
    assert await learner_states(ctx, job_id) == {
        1: (1, LearnerState.PENDING.value),
        2: (2, LearnerState.PENDING.value),
    }
    # The sweep sees each learner in the attempt its row holds: nothing to stop or redo.
    report = await reconcile(ctx)
    assert report.stopped == [] and report.deployed == [], report
    assert _running(agent, job_id)[1]["pid"] == first["pid"]

    await watch(ctx, is_state(ctx, job_id, JobState.COMPLETED), timeout=30)
    job = await load(ctx, job_id)
    assert (job.attempt, job.restarts) == (2, 1)
    async with ctx.sessions() as session:
        [restart] = await repo.events_of_kind(session, job_id, "restart")
        created = await repo.events_of_kind(session, job_id, "learners_created")
        states = [e.to_state for e in await repo.list_events(session, job_id) if e.to_state]
    failure = restart.detail["failure"]
    assert (failure["learner"], failure["cause"], failure["exit_code"]) == (2, "exit", 7)
    assert restart.reason.endswith("restart 1 of 3 from the start")
    assert [e.detail["names"] for e in created] == [
        [f"dlaas-{job_id}-learner-1-a1", f"dlaas-{job_id}-learner-2-a1"],
        [f"dlaas-{job_id}-learner-2-a2"],
    ]
    # The fake runner reports no progress: the job follows the learners' exits. While
    # learner 1 has finished and learner 2 not yet, the job counts as fetching; on a busy
    # machine both exits can land in one pass, and that step is not seen.
    assert states[:4] == [
        JobState.QUEUED,
        JobState.DEPLOYING,
        JobState.RECOVERING,
        JobState.DEPLOYING,
    ]
    assert states[-1] == JobState.COMPLETED
    assert states[4:-1] in ([JobState.DOWNLOADING, JobState.RUNNING], [JobState.RUNNING], [])


async def test_late_reports_from_the_replaced_learner_are_ignored(
    ctx: Context, agent: Agent
) -> None:
    job_id = await _deployed_until_learner_2_restarted(ctx, sleep=30)
    for event in (
        streams.status_event(job_id, 2, 1, "RUNNING"),
        streams.exit_event(job_id, 2, 1, 1, None, "a late report"),
    ):
        await streams.apublish_learner_event(ctx.redis, event)
    await drain(ctx)
    assert await learner_states(ctx, job_id) == {
        1: (1, LearnerState.PENDING.value),
        2: (2, LearnerState.PENDING.value),
    }
    # A report of the replacement, and one of the learner left running, both count.
    for event in (
        streams.status_event(job_id, 2, 2, "RUNNING"),
        streams.status_event(job_id, 1, 1, "RUNNING"),
    ):
        await streams.apublish_learner_event(ctx.redis, event)
    await watch(ctx, is_state(ctx, job_id, JobState.RUNNING), timeout=10)


async def test_a_job_with_learners_of_two_attempts_halts_and_resumes_whole(
    ctx: Context, agent: Agent
) -> None:
    job_id = await _deployed_until_learner_2_restarted(ctx, sleep=30)
    await set_job(ctx, job_id, desired="halt")
    assert await operations.halt_job(ctx, job_id) == operations.Outcome("halted")
    assert agent.learners(job_id) == []
    assert {state for _, state in (await learner_states(ctx, job_id)).values()} == {
        LearnerState.STOPPED.value
    }
    await set_job(ctx, job_id, desired="run")
    await operations.resume_job(ctx, job_id)
    assert await learner_states(ctx, job_id) == {
        1: (3, LearnerState.PENDING.value),
        2: (3, LearnerState.PENDING.value),
    }
    assert sorted(int(str(item["attempt"])) for item in agent.learners(job_id)) == [3, 3]
    await set_job(ctx, job_id, desired="delete")
    assert (await operations.delete_job(ctx, job_id)).message == "deleted"


async def test_an_exit_code_listed_to_fail_fails_the_job_without_a_restart(
    ctx: Context, agent: Agent
) -> None:
    policy = {**LEARNER_SCOPE, "fail_on_exit_codes": [7]}
    job_id = await make_job(
        ctx, FAIL_LEARNER_2_ONCE.format(sleep=30), learners=2, restart_policy=policy
    )
    await operations.deploy_job(ctx, job_id)
    await watch(ctx, is_state(ctx, job_id, JobState.FAILED), timeout=20)
    job = await load(ctx, job_id)
    assert job.restarts == 0
    assert "exit code 7 is one of restart_policy.fail_on_exit_codes" in job.reason
    await harness.eventually(_runs(agent, job_id), 10, "every learner to stop")


async def test_a_learner_killed_while_another_restarts_is_classed_by_its_signal(
    ctx: Context, agent: Agent
) -> None:
    """Learner 1's exit arrives while the job waits out the backoff before restarting
    learner 2 a second time. It is acted on as soon as learner 2 is deployed again, from
    its stored row: that row keeps the signal, so a SIGKILL's 137 is a signal, not a likely
    out-of-memory kill."""
    fail_learner_2_twice = (  # with another code each time: the same one twice is refused
        'if [ "$DLAAS_ATTEMPT" -le 2 ] && [ "$LEARNER_ID" = 2 ]; then '
        'exit "$((6 + DLAAS_ATTEMPT))"; fi; '
        "sleep 30"
    )
    job_id = await make_job(
        ctx, fail_learner_2_twice, learners=2, restart_policy={**LEARNER_SCOPE, "backoff_s": 3}
    )

    def restarts(count: int) -> Callable[[], Awaitable[bool]]:
        async def check() -> bool:
            async with ctx.sessions() as session:
                return len(await repo.events_of_kind(session, job_id, "restart")) == count

        return check

    async def backing_off() -> bool:
        return await restarts(2)() and await is_state(ctx, job_id, JobState.RECOVERING)()

    await operations.deploy_job(ctx, job_id)
    await watch(ctx, backing_off, timeout=20)
    await streams.apublish_learner_event(
        ctx.redis, streams.exit_event(job_id, 1, 1, 137, "SIGKILL", "killed")
    )
    await drain(ctx)
    assert await is_state(ctx, job_id, JobState.RECOVERING)(), "decided during the backoff"
    await watch(ctx, restarts(3), timeout=15)
    async with ctx.sessions() as session:
        *_, last = await repo.events_of_kind(session, job_id, "restart")
    failure = last.detail["failure"]
    assert (failure["learner"], failure["exit_code"], failure["signal"]) == (1, 137, "SIGKILL")
    assert failure["cause"] == "signal"
    await set_job(ctx, job_id, desired="delete")
    assert (await operations.delete_job(ctx, job_id)).message == "deleted"
