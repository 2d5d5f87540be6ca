"""Deploy, halt, resume, delete and reconcile against a real database, Redis and node agent.

The operations run in-process (as a Celery task would run them); learner exits reach the
job through the monitor's handler reading the real event stream.
"""

from __future__ import annotations

import io
import json
import secrets
import time
import zipfile
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis

from lifecycle_manager.backends.local.client import LocalBackend
from lifecycle_manager.entrypoints.monitor import CONSUMER_GROUP, Monitor
from lifecycle_manager.glue import learner_specs, operations
from lifecycle_manager.glue.context import Context
from lifecycle_manager.glue.reconcile import reconcile
from storage import job_redis_users, streams
from storage import jobs as repo
from storage.job_states import JobState, LearnerState
from storage.models import Job, utcnow
from storage.users import create_user
from tests import services
from tests.integration import test_lifecycle_harness as harness
from tests.integration.test_lifecycle_harness import Agent, eventually

shared_agent = harness.shared_agent
agent = harness.agent
fake_runner = harness.fake_runner
database_url = harness.database_url
ctx = harness.ctx


@pytest.fixture
def use_fake_runner(monkeypatch: pytest.MonkeyPatch, fake_runner: str) -> None:
    monkeypatch.setattr(learner_specs, "RUNNER", fake_runner)


async def make_job(ctx: Context, command: str, learners: int = 1, **manifest: Any) -> str:
    body = {"learners": learners, "framework": {"command": command}, **manifest}
    async with ctx.sessions.begin() as session:
        user, _token = await create_user(session, services.unique_name("user"))
        job = await repo.create_job(
            session, owner_id=user.id, name="test", learners=learners, manifest=body
        )
    return job.id


async def load(ctx: Context, job_id: str) -> Job:
    async with ctx.sessions() as session:
        job = await repo.get_job_any(session, job_id)
        assert job is not None
        return job


async def learner_states(ctx: Context, job_id: str) -> dict[int, tuple[int, str]]:
    async with ctx.sessions() as session:
        rows = await repo.learners_of(session, job_id)
        return {row.index: (row.attempt, row.state) for row in rows}


async def event_kinds(ctx: Context, job_id: str) -> list[str]:
    async with ctx.sessions() as session:
        return [event.kind for event in await repo.list_events(session, job_id)]


async def set_job(ctx: Context, job_id: str, **changes: Any) -> None:
    async with ctx.sessions.begin() as session:
        await repo.update_job(session, job_id, **changes)


def runner_record(agent: Agent, job_id: str, learner: int, attempt: int = 1) -> dict[str, Any]:
    path = agent.root / "jobs" / job_id / f"learner-{learner}" / f"a{attempt}" / "runner.json"
    deadline = time.monotonic() + 10
    while not path.exists():
        assert time.monotonic() < deadline, f"the runner of learner {learner} never started"
        time.sleep(0.05)
    record: dict[str, Any] = json.loads(path.read_text())
    return record


def is_state(ctx: Context, job_id: str, state: JobState) -> Callable[[], Awaitable[bool]]:
    async def check() -> bool:
        return (await load(ctx, job_id)).state == state

    return check


async def watch(ctx: Context, check: Callable[[], Awaitable[bool]], timeout: float = 15) -> None:
    """Run the monitor on the real event stream until `check` holds."""
    await streams.aensure_learner_group(ctx.redis, CONSUMER_GROUP)
    monitor = Monitor(ctx, f"test-{secrets.token_hex(4)}")

    async def step_then_check() -> bool:
        await monitor.step(block_ms=50)
        return await check()

    await eventually(step_then_check, timeout, "the monitor to apply the learners' events")


async def drain(ctx: Context) -> int:
    """Run the monitor until the event stream has nothing new; returns how many it handled."""
    await streams.aensure_learner_group(ctx.redis, CONSUMER_GROUP)
    monitor = Monitor(ctx, f"test-{secrets.token_hex(4)}")
    total = await monitor.step()  # its own unacknowledged events (none: it is new)
    while handled := await monitor.step(block_ms=100):
        total += handled
    return total


pytestmark = pytest.mark.usefixtures("use_fake_runner")


async def test_deploy_creates_every_learner_with_its_environment(
    ctx: Context, agent: Agent
) -> None:
    job_id = await make_job(
        ctx,
        "sleep 30",
        learners=2,
        checkpoint={"interval_s": 7.0, "keep": 4},
        environment={"LR": "0.5"},
    )
    outcome = await operations.deploy_job(ctx, job_id)
    assert outcome == operations.Outcome("attempt 1: 2 of 2 learners created")
    job = await load(ctx, job_id)
    assert (job.state, job.attempt) == (JobState.DEPLOYING, 1)
    assert await learner_states(ctx, job_id) == {1: (1, "PENDING"), 2: (1, "PENDING")}
    names = sorted(str(item["name"]) for item in agent.learners(job_id))
    assert names == [f"dlaas-{job_id}-learner-1-a1", f"dlaas-{job_id}-learner-2-a1"]
    records = [runner_record(agent, job_id, learner) for learner in (1, 2)]
    for learner, record in enumerate(records, start=1):
        assert record["argv"] == ["--job", job_id, "--learner", str(learner), "--attempt", "1"]
        env = record["env"]
        assert env["TRAINING_ID"] == job_id
        assert (env["LEARNER_ID"], env["RANK"]) == (str(learner), str(learner - 1))
        assert env["NUM_LEARNERS"] == env["WORLD_SIZE"] == "2"
        assert env["DLAAS_ATTEMPT"] == "1"
        assert env["DLAAS_CHECKPOINT_INTERVAL"] == "7.0"
        assert env["DLAAS_CHECKPOINT_KEEP"] == "4"
        # Redis as the job's own user, with the job's token: it reaches the job's keys only.
        assert env["DLAAS_REDIS_URL"] == job_redis_users.learner_url(
            ctx.settings.redis_url, job_id, env["DLAAS_JOB_TOKEN"]
        )
        as_learner = redis.Redis.from_url(env["DLAAS_REDIS_URL"])
        try:
            assert as_learner.xadd(streams.events_key(job_id), {"probe": "1"})
            with pytest.raises(redis.exceptions.NoPermissionError):
                as_learner.xadd(streams.LEARNER_EVENTS, {"job": "another"})
        finally:
            as_learner.close()
        # The user's environment reaches the runner only as data for its program.
        assert "LR" not in env
        assert json.loads(env["DLAAS_PROGRAM_ENV"]) == {"LR": "0.5"}
        assert env["CHECKPOINT_DIR"].endswith(
            f"/jobs/{job_id}/learner-{learner}/a1/program/checkpoints"
        )
    assert records[0]["env"]["MASTER_PORT"] == records[1]["env"]["MASTER_PORT"]
    assert (await event_kinds(ctx, job_id)).count("learners_created") == 1

    again = await operations.deploy_job(ctx, job_id)
    assert again == operations.Outcome("attempt 1: 0 of 2 learners created")
    assert (await event_kinds(ctx, job_id)).count("learners_created") == 1
    assert len(agent.learners(job_id)) == 2


async def test_learners_exiting_zero_complete_the_job(ctx: Context, agent: Agent) -> None:
    job_id = await make_job(ctx, "exit 0", learners=2)
    await streams.aappend_logs(ctx.redis, job_id, [streams.LogBatch(1, 0, 1, ("a line",), 1.0)])
    await operations.deploy_job(ctx, job_id)
    await watch(ctx, is_state(ctx, job_id, JobState.COMPLETED))
    job = await load(ctx, job_id)
    assert job.reason == "training finished: 2 learners exited 0"

    async def _logs_expire() -> bool:
        return 0 < await ctx.redis.ttl(streams.logs_key(job_id)) <= 3600

    await eventually(_logs_expire, what="the finished job's log stream set to expire")
    assert await learner_states(ctx, job_id) == {1: (1, "SUCCEEDED"), 2: (1, "SUCCEEDED")}
    async with ctx.sessions() as session:
        exits = await repo.events_of_kind(session, job_id, "learner_exit")
    assert len(exits) == 2
    # Each exit carries when the learner ended, as the node agent saw it.
    for exit_event in exits:
        assert time.time() - 60 < exit_event.detail["exited_at"] <= time.time()
    await eventually(lambda: _no_learners(agent, job_id), what="the finished learners removed")


async def _no_learners(agent: Agent, job_id: str) -> bool:
    return agent.learners(job_id) == []


async def test_a_failing_learner_fails_the_job_and_stops_the_others(
    ctx: Context, agent: Agent
) -> None:
    job_id = await make_job(
        ctx,
        '[ "$LEARNER_ID" = 2 ] && exit 7; sleep 30',
        learners=2,
        restart_policy={"max_restarts": 0},
    )
    await operations.deploy_job(ctx, job_id)
    await watch(ctx, is_state(ctx, job_id, JobState.FAILED))
    assert (await load(ctx, job_id)).reason == (
        "learner 2 failed: exit code 7; no restarts left (0 of 0 used)"
    )

    async def learner_1_stopped() -> bool:
        return (await learner_states(ctx, job_id))[1] == (1, LearnerState.STOPPED)

    await watch(ctx, learner_1_stopped)
    assert (await load(ctx, job_id)).state == JobState.FAILED
    await eventually(lambda: _no_learners(agent, job_id), what="the other learner stopped")


async def test_halt_stops_the_learners_and_resume_deploys_a_new_attempt(
    ctx: Context, agent: Agent
) -> None:
    job_id = await make_job(ctx, "sleep 30")
    await operations.deploy_job(ctx, job_id)
    runner_record(agent, job_id, 1)
    await set_job(ctx, job_id, desired="halt")  # what the API does before it nudges
    assert await operations.halt_job(ctx, job_id) == operations.Outcome("halted")
    job = await load(ctx, job_id)
    assert (job.state, job.reason) == (JobState.HALTED, "halted by user")
    assert agent.learners(job_id) == []
    assert await learner_states(ctx, job_id) == {1: (1, "STOPPED")}
    # The learner's exit, caused by the halt, changes nothing when the monitor reads it.
    assert await drain(ctx) >= 1
    assert (await load(ctx, job_id)).state == JobState.HALTED
    assert await learner_states(ctx, job_id) == {1: (1, "STOPPED")}
    assert await operations.halt_job(ctx, job_id) == operations.Outcome("already halted")

    await set_job(ctx, job_id, desired="run")
    outcome = await operations.resume_job(ctx, job_id)
    assert outcome == operations.Outcome("attempt 2: 1 of 1 learners created")
    job = await load(ctx, job_id)
    assert (job.state, job.attempt) == (JobState.DEPLOYING, 2)
    assert [item["name"] for item in agent.learners(job_id)] == [f"dlaas-{job_id}-learner-1-a2"]
    assert runner_record(agent, job_id, 1, attempt=2)["env"]["DLAAS_ATTEMPT"] == "2"
    kinds = await event_kinds(ctx, job_id)
    assert kinds.count("learners_created") == 2


async def test_a_resume_that_overtakes_its_halt_finishes_the_halt_first(
    ctx: Context, agent: Agent
) -> None:
    job_id = await make_job(ctx, "sleep 30")
    await operations.deploy_job(ctx, job_id)
    async with ctx.sessions.begin() as session:  # the halt had begun stopping the learner
        await repo.set_learner_state(session, job_id, 1, 1, LearnerState.STOPPING.value)
    outcome = await operations.resume_job(ctx, job_id)
    assert outcome == operations.Outcome("attempt 2: 1 of 1 learners created")
    states = [event.to_state for event in await _events(ctx, job_id) if event.kind == "state"]
    assert states[-3:] == [JobState.HALTED, JobState.QUEUED, JobState.DEPLOYING]
    assert [item["name"] for item in agent.learners(job_id)] == [f"dlaas-{job_id}-learner-1-a2"]


async def _events(ctx: Context, job_id: str) -> list[Any]:
    async with ctx.sessions() as session:
        return list(await repo.list_events(session, job_id))


def _zip(files: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, data in files.items():
            archive.writestr(name, data)
    return buffer.getvalue()


async def test_delete_stops_learners_and_removes_objects_and_streams(
    ctx: Context, agent: Agent, redis_client: redis.Redis
) -> None:
    job_id = await make_job(ctx, "sleep 30")
    other_id = await make_job(ctx, "sleep 30")
    for key in (f"jobs/{job_id}/model.zip", f"jobs/{job_id}/logs/learner-1.log"):
        ctx.objects.put_bytes(key, b"x")
    ctx.objects.put_bytes(f"jobs/{other_id}/model.zip", b"kept")
    streams.append_logs(redis_client, job_id, [streams.LogBatch(1, 0, 1, ("hello",), time.time())])
    await operations.deploy_job(ctx, job_id)
    await set_job(ctx, job_id, desired="delete", deleted_at=utcnow())

    outcome = await operations.delete_job(ctx, job_id)
    assert outcome == operations.Outcome("deleted")
    assert agent.learners(job_id) == []
    assert list(ctx.objects.list(f"jobs/{job_id}/")) == []
    assert ctx.objects.get_bytes(f"jobs/{other_id}/model.zip") == b"kept"
    assert redis_client.exists(*streams.job_keys(job_id)) == 0
    purged = (await _events(ctx, job_id))[-1]
    assert purged.kind == "purged"
    assert purged.detail == {"objects": 2, "redis_keys": 1}
    assert await operations.delete_job(ctx, job_id) == operations.Outcome("already deleted")


async def test_reconcile_deploys_lost_nudges_stops_orphans_and_is_then_a_no_op(
    ctx: Context, agent: Agent
) -> None:
    deleted = await make_job(ctx, "sleep 30")
    finished = await make_job(ctx, "sleep 30")
    for job_id in (deleted, finished):
        await operations.deploy_job(ctx, job_id)
    queued = await make_job(ctx, "sleep 30")  # its nudge was lost
    await set_job(ctx, deleted, desired="delete", deleted_at=utcnow())  # no delete task ran
    async with ctx.sessions.begin() as session:
        await repo.transition(session, finished, JobState.FAILED, "failed elsewhere")

    report = await reconcile(ctx)
    assert report.deployed == [queued]
    assert sorted(report.stopped) == sorted([deleted, finished])
    assert report.finished == [deleted]
    assert report.errors == []
    assert (await load(ctx, queued)).state == JobState.DEPLOYING
    assert {str(item["job"]) for item in agent.learners()} == {queued}
    assert (await event_kinds(ctx, deleted))[-1] == "purged"

    events_before = {job_id: await event_kinds(ctx, job_id) for job_id in (queued, deleted)}
    second = await reconcile(ctx)
    assert not second, second
    assert {job_id: await event_kinds(ctx, job_id) for job_id in events_before} == events_before


async def test_reconcile_applies_missed_exits_and_recovers_jobs_whose_learners_vanished(
    ctx: Context, agent: Agent
) -> None:
    lost = await make_job(ctx, "sleep 30")
    crashed = await make_job(ctx, "exit 3", restart_policy={"max_restarts": 0})
    for job_id in (lost, crashed):
        await operations.deploy_job(ctx, job_id)
        async with ctx.sessions.begin() as session:  # what status events would have said
            await repo.set_learner_state(session, job_id, 1, 1, LearnerState.RUNNING.value)
            await repo.transition(session, job_id, JobState.RUNNING, "training")
    httpx.delete(f"{agent.url}/jobs/{lost}", params={"wait": 5}, headers=agent.headers, timeout=10)
    await eventually(
        lambda: _phase_is(agent, crashed, "Failed"), what="the crashing learner to exit"
    )

    report = await reconcile(ctx)
    assert sorted(report.updated) == sorted([lost, crashed])
    job = await load(ctx, lost)
    assert job.state in (JobState.RECOVERING, JobState.DEPLOYING, JobState.RUNNING)
    assert "restart" in await event_kinds(ctx, lost)
    job = await load(ctx, crashed)
    assert (job.state, job.reason) == (
        JobState.FAILED,
        "learner 1 failed: exit code 3; no restarts left (0 of 0 used)",
    )


async def test_a_job_whose_learners_all_ended_is_finished_by_the_next_reconcile(
    ctx: Context, agent: Agent
) -> None:
    """The state a lost or refused step leaves behind: every learner row says it ended, the
    job still says RUNNING, and no event about it will come again."""
    done = await make_job(ctx, "true", learners=2)
    interrupted = await make_job(ctx, "true", restart_policy={"max_restarts": 0})
    await operations.deploy_job(ctx, done)
    await operations.deploy_job(ctx, interrupted)
    for job_id in (done, interrupted):
        await eventually(lambda job_id=job_id: _all_phases(agent, job_id, "Succeeded"))
    async with ctx.sessions.begin() as session:
        await repo.transition(session, done, JobState.RUNNING, "training on 2 learners")
        for index in (1, 2):
            await repo.set_learner_state(
                session, done, index, 1, "SUCCEEDED", exit_code=0, reason="exit code 0"
            )
        await repo.transition(session, interrupted, JobState.RUNNING, "training")
        await repo.set_learner_state(
            session,
            interrupted,
            1,
            1,
            "FAILED",
            exit_code=143,
            reason="interrupted while it should run: exit code 143",
            cause="interrupted",
        )

    await reconcile(ctx)
    job = await load(ctx, done)
    assert (job.state, job.reason) == (JobState.COMPLETED, "training finished: 2 learners exited 0")
    job = await load(ctx, interrupted)
    assert job.state in (JobState.RECOVERING, JobState.DEPLOYING)
    assert job.restarts == 0  # an interruption is no restart, as its row says
    async with ctx.sessions() as session:
        [restart] = await repo.events_of_kind(session, interrupted, "restart")
    assert restart.detail["failure"]["cause"] == "interrupted"


async def _all_phases(agent: Agent, job_id: str, phase: str) -> bool:
    phases = [item["phase"] for item in agent.learners(job_id)]
    return bool(phases) and set(phases) == {phase}


async def _phase_is(agent: Agent, job_id: str, phase: str) -> bool:
    return [item["phase"] for item in agent.learners(job_id)] == [phase]


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
async def test_deploy_waits_with_a_reason_while_the_agent_is_unreachable(
    ctx: Context, agent: Agent
) -> None:
    job_id = await make_job(ctx, "sleep 30")
    reachable = ctx.backend
    ctx.backend = LocalBackend(
        f"http://127.0.0.1:{services.free_port()}", token=agent.token, timeout=2
    )
    try:
        outcome = await operations.deploy_job(ctx, job_id)
    finally:
        await ctx.backend.aclose()
        ctx.backend = reachable
    assert outcome.retry_after is not None
    job = await load(ctx, job_id)
    assert job.state == JobState.DEPLOYING
    assert job.reason.startswith("waiting for the cluster: node agent at")
    assert await operations.deploy_job(ctx, job_id) == operations.Outcome(
        "attempt 1: 1 of 1 learners created"
    )


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
async def test_the_real_runner_completes_a_job(
    ctx: Context,
    agent: Agent,
    monkeypatch: pytest.MonkeyPatch,
    redis_client: redis.Redis,
    tmp_path: Path,
) -> None:
    monkeypatch.setattr(learner_specs, "RUNNER", "dlaas-learner")
    job_id = await make_job(ctx, "cat notes.txt")
    ctx.objects.put_bytes(f"jobs/{job_id}/model.zip", _zip({"notes.txt": b"hello dlaas\n"}))
    api = services.start_gateway_api(ctx.settings, tmp_path / "api")  # the runner's objects
    try:
        await operations.deploy_job(ctx, job_id)
        await watch(ctx, is_state(ctx, job_id, JobState.COMPLETED), timeout=40)
    finally:
        api.stop()
    states = [event.to_state for event in await _events(ctx, job_id) if event.kind == "state"]
    assert states[0] == JobState.DEPLOYING
    assert states[-1] == JobState.COMPLETED
    lines = [line for _id, batch in streams.read_logs(redis_client, job_id) for line in batch.lines]
    assert "hello dlaas" in lines
