"""The scheduler's lease and fence, on a real Redis (a database of each test's own) and on
SQLite and PostgreSQL: a dead holder's lease is taken over within its 3 s; renewal keeps a
long pass's lease, and one that cannot renew it is abandoned; a holder whose lease lapsed
applies none of its decisions once a newer holder wrote, and one paused inside its
transaction holds the next up for a bounded time; the passes admit jobs as before.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import redis.asyncio as aioredis
from sqlalchemy.exc import DBAPIError

from lifecycle_manager.glue import scheduler_lease, scheduling_pass
from lifecycle_manager.glue.context import Context
from lifecycle_manager.glue.scheduler_lease import LEASE_KEY, TOKEN_KEY, LeaseTimings
from storage import jobs as repo
from storage import scheduler_fence
from storage.db import is_sqlite, make_engine, make_sessionmaker
from storage.job_states import JobState
from tests import services
from tests.integration import test_lifecycle_harness as harness
from tests.integration.test_lifecycle_harness import (
    Agent,
    eventually,
    lifecycle_context,
    lm_settings,
)
from tests.integration.test_lifecycle_operations import load, make_job

shared_agent = harness.shared_agent
agent = harness.agent
database_url = harness.database_url

# What a caller may wait for a dead holder's lease: its TTL, and room for a busy machine.
TAKEOVER_BOUND = LeaseTimings(wait_at_most_s=scheduler_lease.LEASE_TTL_S + 2.0)


@pytest.fixture
async def redis(private_redis_url: str) -> AsyncIterator[aioredis.Redis]:
    client = aioredis.Redis.from_url(private_redis_url)
    try:
        yield client
    finally:
        await client.aclose()


@pytest.fixture
async def ctx(
    tmp_path: Path, database_url: str, private_redis_url: str, agent: Agent
) -> AsyncIterator[Context]:
    settings = lm_settings(
        tmp_path, database_url, private_redis_url, agent, local_gpus=2, local_gpu_product="T4"
    )
    async with lifecycle_context(settings) as context:
        yield context


async def test_a_lease_whose_holder_is_gone_is_taken_by_another_within_its_ttl(
    redis: aioredis.Redis,
) -> None:
    dead = await scheduler_lease.try_acquire(redis)  # never renewed nor released
    assert dead is not None
    assert await scheduler_lease.try_acquire(redis) is None
    with pytest.raises(scheduler_lease.LeaseBusy):
        await scheduler_lease.acquire(redis, LeaseTimings(wait_at_most_s=0.2))

    taker = await scheduler_lease.acquire(redis, TAKEOVER_BOUND)

    assert taker.token > dead.token
    assert not await scheduler_lease.renew(redis, dead), "the dead holder's lease came back"
    await scheduler_lease.release(redis, dead)  # a late release leaves the new holder's be
    assert await redis.get(LEASE_KEY) == taker.holder.encode()


async def test_renewal_keeps_a_pass_longer_than_the_ttl_holding_its_lease(
    redis: aioredis.Redis,
) -> None:
    ttl_ms = scheduler_lease.LEASE_TTL_S * 1000
    renewals = 0
    last_ttl = ttl_ms

    async with scheduler_lease.held(redis) as lease:

        async def renewed_past_the_ttl() -> bool:
            """Whether the lease's TTL went back up (a renewal) more times than a TTL
            lasts renewals, the lease still ours and no one else able to take it."""
            nonlocal renewals, last_ttl
            assert await scheduler_lease.try_acquire(redis) is None
            left = await redis.pttl(LEASE_KEY)
            assert left > 0, "the lease lapsed while its holder ran"
            renewals += left > last_ttl
            last_ttl = left
            return renewals > scheduler_lease.LEASE_TTL_S / scheduler_lease.RENEW_EVERY_S

        await eventually(renewed_past_the_ttl, timeout=15, what="renewals past the TTL")
        assert await redis.get(LEASE_KEY) == lease.holder.encode()

    assert await redis.get(LEASE_KEY) is None, "the lease was not released"


async def test_a_pass_whose_lease_is_lost_is_abandoned(redis: aioredis.Redis) -> None:
    never = asyncio.Event()
    with pytest.raises(scheduler_lease.LeaseLost):
        async with scheduler_lease.held(redis) as lease:
            await redis.set(LEASE_KEY, "another holder", px=3000)  # lapsed and taken
            await asyncio.wait_for(never.wait(), timeout=10)
    assert await redis.get(LEASE_KEY) == b"another holder", "the new holder's lease was freed"
    assert lease.token > 0


async def test_a_pass_that_cannot_renew_for_a_whole_ttl_is_abandoned(tmp_path: Path) -> None:
    server, url = services.start_redis(tmp_path)
    redis = aioredis.Redis.from_url(url, socket_timeout=0.5, socket_connect_timeout=0.5)
    never = asyncio.Event()
    try:
        with pytest.raises(scheduler_lease.LeaseLost):
            async with scheduler_lease.held(redis):
                server.stop()  # Redis is gone: no renewal can say the lease is still ours
                await asyncio.wait_for(never.wait(), timeout=15)
    finally:
        server.stop()
        await redis.aclose()


async def _kinds(ctx: Context, job_id: str) -> set[str]:
    async with ctx.sessions() as session:
        return {event.kind for event in await repo.list_events(session, job_id)}


async def test_a_stale_holder_applies_nothing_once_a_newer_token_wrote(ctx: Context) -> None:
    stale = await scheduler_lease.try_acquire(ctx.redis)
    assert stale is not None
    await ctx.redis.delete(LEASE_KEY)  # its holder paused past the lease's end
    assert await scheduling_pass.run_pass(ctx) is not None  # a newer holder's pass wrote
    fits = await make_job(ctx, "sleep 60", gpus=1)
    waits = await make_job(ctx, "sleep 60", gpus=2)
    nodes = await ctx.backend.nodes()
    before = {
        job_id: (await _kinds(ctx, job_id), await load(ctx, job_id)) for job_id in (fits, waits)
    }

    with pytest.raises(scheduler_fence.StaleToken):
        await scheduling_pass.fenced_pass(ctx, nodes, stale.token)

    for job_id in (fits, waits):
        kinds, job = before[job_id]
        assert await _kinds(ctx, job_id) == kinds, "a stale decision landed"
        now = await load(ctx, job_id)
        assert (now.state, now.reason) == (JobState.QUEUED, job.reason), now.reason

    recorded = await scheduling_pass.run_pass(ctx)  # the next holder decides again

    assert recorded is not None
    assert [a.job_id for a in recorded.decided.admissions] == [fits]
    assert [w.job_id for w in recorded.decided.waiting] == [waits]
    assert "admitted" in await _kinds(ctx, fits)
    assert "GPU" in (await load(ctx, waits)).reason


async def test_a_holder_paused_in_its_transaction_holds_the_next_up_only_so_long(
    database_url: str,
) -> None:
    if is_sqlite(database_url):
        pytest.skip("SQLite has one writer: a paused one holds up every other (busy_timeout)")
    engine = make_engine(database_url)
    sessions = make_sessionmaker(engine)
    paused = sessions()
    try:
        await scheduler_fence.claim(paused, 1, idle_limit_s=1.0)  # then sends nothing more
        async with sessions.begin() as session:
            await asyncio.wait_for(scheduler_fence.claim(session, 2), timeout=15)
        with pytest.raises(DBAPIError):  # the server ended the paused holder's session
            await paused.commit()
        async with sessions() as session:
            assert await scheduler_fence.newest_token(session) == 2
    finally:
        await paused.close()
        await engine.dispose()


async def test_a_pass_admits_a_job_and_gives_the_lease_back(ctx: Context) -> None:
    job_id = await make_job(ctx, "sleep 60", gpus=1)

    recorded = await scheduling_pass.run_pass(ctx)

    assert recorded is not None and [a.job_id for a in recorded.decided.admissions] == [job_id]
    assert await ctx.redis.get(LEASE_KEY) is None
    async with ctx.sessions() as session:
        assert await scheduler_fence.newest_token(session) == int(await ctx.redis.get(TOKEN_KEY))


async def test_passes_run_again_when_redis_lost_the_token_counter(ctx: Context) -> None:
    for _ in range(3):
        assert await scheduling_pass.run_pass(ctx) is not None
    await ctx.redis.delete(TOKEN_KEY)  # Redis restarted without its data
    job_id = await make_job(ctx, "sleep 60", gpus=1)

    assert await scheduling_pass.run_pass(ctx) is None  # refused: its token is below the fence
    recorded = await scheduling_pass.run_pass(ctx)

    assert recorded is not None and [a.job_id for a in recorded.decided.admissions] == [job_id]


async def test_passes_at_once_admit_a_job_once(ctx: Context) -> None:
    job_id = await make_job(ctx, "sleep 60", gpus=2)

    passes = await asyncio.gather(*(scheduling_pass.run_pass(ctx) for _ in range(3)))

    admitted = [a.job_id for p in passes if p is not None for a in p.decided.admissions]
    assert admitted == [job_id]
    assert sum(p is not None for p in passes) == 3, "a pass gave up waiting for the lease"
