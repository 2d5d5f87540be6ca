"""The monitor service loop (`Monitor.run`) against the real Redis and database."""

from __future__ import annotations

import asyncio
import dataclasses
import secrets
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from lifecycle_manager import liveness
from lifecycle_manager.entrypoints.monitor import BLOCK_MS, CONSUMER_GROUP, MAX_FAILURES, Monitor
from lifecycle_manager.glue.context import Context
from lifecycle_manager.glue.learner_reports import (
    CHECKPOINT_FAILED_EVENT,
    apply_learner_events,
    newest_checkpoint,
)
from lifecycle_manager.liveness import Heartbeat
from storage import jobs as repo
from storage import streams
from storage.job_states import JobState
from tests.integration import test_lifecycle_harness as harness
from tests.integration.test_lifecycle_harness import eventually
from tests.integration.test_lifecycle_operations import is_state, make_job

shared_agent = harness.shared_agent
agent = harness.agent
database_url = harness.database_url
ctx = harness.ctx


@pytest.fixture
async def running_monitor(ctx: Context) -> AsyncIterator[Monitor]:
    monitor = Monitor(ctx, f"test-{secrets.token_hex(4)}")
    stop = asyncio.Event()
    task = asyncio.create_task(monitor.run(stop))
    try:
        yield monitor
    finally:
        stop.set()
        await asyncio.wait_for(task, timeout=15)


async def deploying_job(ctx: Context) -> str:
    """A job as `deploy_job` leaves it: DEPLOYING attempt 1, its learner PENDING."""
    job_id = await make_job(ctx, "sleep 30")
    async with ctx.sessions.begin() as session:
        await repo.transition(session, job_id, JobState.DEPLOYING, "creating learners", attempt=1)
        await repo.reset_learners(session, job_id, 1, 1)
    return job_id


async def test_the_monitor_goes_on_after_redis_lost_the_stream_and_its_group(
    ctx: Context, running_monitor: Monitor
) -> None:
    job_id = await deploying_job(ctx)
    await streams.apublish_learner_event(
        ctx.redis, streams.status_event(job_id, 1, 1, "DOWNLOADING")
    )
    await eventually(is_state(ctx, job_id, JobState.DOWNLOADING), 10, "the first event")

    steps = 0
    real_step = running_monitor.step

    async def counted_step(block_ms: int = BLOCK_MS) -> int:
        nonlocal steps
        steps += 1
        return await real_step(block_ms)

    running_monitor.step = counted_step  # type: ignore[method-assign]
    # What a Redis restarted without its data looks like: no stream, no consumer group.
    await ctx.redis.delete(streams.LEARNER_EVENTS)
    # The monitor reads (and used to fail) at least once after the loss.
    after_loss = steps + 1  # the read under way may have begun before it
    await eventually(lambda: asyncio.sleep(0, steps > after_loss), 10, "a read after the loss")
    await streams.apublish_learner_event(ctx.redis, streams.status_event(job_id, 1, 1, "RUNNING"))
    await eventually(is_state(ctx, job_id, JobState.RUNNING), 10, "an event after the loss")


async def test_the_probe_sees_the_monitor_alive_and_then_hung(ctx: Context, tmp_path: Path) -> None:
    path = tmp_path / "alive"
    monitor = Monitor(ctx, f"test-{secrets.token_hex(4)}", Heartbeat(path, every_s=0.1))
    probe = [str(path), "--max-age", "1"]
    stop, unblock = asyncio.Event(), asyncio.Event()
    task = asyncio.create_task(monitor.run(stop))
    try:
        await eventually(lambda: asyncio.sleep(0, liveness.main(probe) == 0), 5, "a heartbeat")
        await asyncio.sleep(1.5)
        assert liveness.main(probe) == 0  # refreshed all along

        real_step = monitor.step

        async def hung_step(block_ms: int = BLOCK_MS) -> int:
            await unblock.wait()  # as a read or a database write that never returns
            return await real_step(block_ms)

        monitor.step = hung_step  # type: ignore[method-assign]
        await eventually(lambda: asyncio.sleep(0, liveness.main(probe) == 1), 5, "staleness")
    finally:
        stop.set()
        unblock.set()
        await asyncio.wait_for(task, timeout=15)


async def test_a_job_whose_event_keeps_failing_holds_up_neither_its_other_events_nor_others(
    ctx: Context,
) -> None:
    """A batch is applied a job at a time; an event that fails is tried alone, again on
    later steps, and dropped after MAX_FAILURES, while everything else goes on."""
    poisoned, healthy = await deploying_job(ctx), await deploying_job(ctx)
    async with ctx.sessions.begin() as session:  # a manifest no restart policy can be read from
        job = await repo.get_job_any(session, poisoned)
        assert job is not None
        job.manifest = {**job.manifest, "restart_policy": {"scope": "nonsense"}}
    await streams.aensure_learner_group(ctx.redis, CONSUMER_GROUP)
    monitor = Monitor(ctx, f"test-{secrets.token_hex(4)}")
    await monitor.step(block_ms=None)  # its own backlog (none), then what others left
    while await monitor.step(block_ms=None):
        pass
    for event in (
        streams.status_event(poisoned, 1, 1, "DOWNLOADING"),
        streams.exit_event(poisoned, 1, 1, 1, None, "exit code 1"),  # its failure cannot be judged
        streams.status_event(healthy, 1, 1, "DOWNLOADING"),
    ):
        await streams.apublish_learner_event(ctx.redis, event)

    assert await monitor.step(block_ms=None) == 2  # all but the failing event
    assert await learner_state(ctx, poisoned) == "DOWNLOADING"  # the event before it went in
    assert await learner_state(ctx, healthy) == "DOWNLOADING"
    for _ in range(MAX_FAILURES - 2):  # the first try was the first failure
        assert await monitor.step(block_ms=None) == 0  # tried again: failing again
    assert await monitor.step(block_ms=None) == 1  # its last try: dropped
    assert await monitor.step(block_ms=None) == 0  # nothing of it left
    pending = await ctx.redis.xpending(streams.LEARNER_EVENTS, CONSUMER_GROUP)
    assert pending["pending"] == 0 or monitor.consumer not in {
        consumer["name"].decode() for consumer in pending["consumers"]
    }


async def learner_state(ctx: Context, job_id: str) -> str:
    async with ctx.sessions() as session:
        [row] = await repo.learners_of(session, job_id)
    return row.state


async def test_a_failed_checkpoint_is_a_job_event_and_not_a_checkpoint_to_resume_from(
    ctx: Context,
) -> None:
    """The runner reports a save the SDK could not write as a learner `checkpoint` event
    with `failed` (the error) and `step` fields."""
    job_id = await deploying_job(ctx)
    committed = streams.checkpoint_event(job_id, 1, 1, "ckpt-000000000100")
    failed = streams.checkpoint_event(job_id, 1, 1, "ckpt-000000000120")
    error = "OSError: [Errno 28] No space left on device"
    failed = dataclasses.replace(failed, fields={**failed.fields, "step": "120", "failed": error})

    assert await apply_learner_events(ctx, job_id, [committed, failed]) is None  # no row moved
    async with ctx.sessions() as session:
        [event] = await repo.events_of_kind(session, job_id, CHECKPOINT_FAILED_EVENT)
        assert event.reason == f"checkpoint step 120 failed: {error}"
        assert event.detail == {
            "name": "ckpt-000000000120",
            "learner": 1,
            "attempt": 1,
            "step": 120,
            "error": error,
        }
        assert await newest_checkpoint(session, job_id) == "ckpt-000000000100"
