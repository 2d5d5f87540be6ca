"""Jobs' Redis users and the event relay against the real Redis (and database): a job's token
signs in as the job's user while the job may run; its learners' events reach the shared
stream once each, as their own job's."""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator

import pytest
import redis
import redis.asyncio as aioredis

from lifecycle_manager.glue import job_users
from lifecycle_manager.glue.context import Context
from lifecycle_manager.glue.event_relay import EventRelay
from storage import job_credentials, job_redis_users, streams
from storage import jobs as repo
from tests.integration import test_lifecycle_harness as harness
from tests.integration.test_lifecycle_operations import make_job

shared_agent = harness.shared_agent
agent = harness.agent
database_url = harness.database_url
ctx = harness.ctx


def _signs_in(platform_url: str, job_id: str, token: str) -> bool:
    client = redis.Redis.from_url(job_redis_users.learner_url(platform_url, job_id, token))
    try:
        return bool(client.ping())
    except redis.AuthenticationError:
        return False
    finally:
        client.close()


async def _minted(ctx: Context, job_id: str) -> str:
    async with ctx.sessions.begin() as session:
        return await job_credentials.mint(session, job_id)


async def _relayed_of(client: aioredis.Redis, job_id: str) -> list[dict[bytes, bytes]]:
    entries = await client.xrange(streams.LEARNER_EVENTS)
    return [fields for _, fields in entries if fields.get(b"job") == job_id.encode()]


def _event(job_id: str, learner: int, **fields: str) -> dict[str, str]:
    event = streams.status_event(job_id, learner, 1, "RUNNING")
    return streams.encode_learner_event(event) | fields


@pytest.fixture
async def relay_redis(redis_url: str) -> AsyncIterator[aioredis.Redis]:
    client = aioredis.Redis.from_url(redis_url)
    try:
        yield client
    finally:
        await client.aclose()


async def test_a_live_jobs_tokens_sign_in_until_the_job_stops(ctx: Context) -> None:
    url = ctx.settings.redis_url
    job_id = await make_job(ctx, "true")
    first, second = await _minted(ctx, job_id), await _minted(ctx, job_id)
    assert not _signs_in(url, job_id, first)
    plan = await job_users.sync(ctx)
    assert set(plan.grant[job_id]) == {job_credentials.hash_job_token(t) for t in (first, second)}
    assert _signs_in(url, job_id, first) and _signs_in(url, job_id, second)
    assert not _signs_in(url, job_id, "dlaasjob_guessed")
    assert not await job_users.sync(ctx)  # nothing to change

    held = redis.Redis.from_url(job_redis_users.learner_url(url, job_id, first))
    try:
        assert held.ping()
        async with ctx.sessions.begin() as session:
            await repo.mark_deleted(session, job_id, "deleted")
        plan = await job_users.sync(ctx)
        assert plan.revoke == (job_id,)
        assert not _signs_in(url, job_id, first)
        with pytest.raises(redis.ConnectionError):  # its connection was closed, not kept
            held.ping()
    finally:
        held.close()
    relayed = await job_redis_users.arelayed(ctx.redis)
    assert relayed[job_id] > 0  # relayed for a grace period still


async def test_users_redis_lost_are_made_again_from_the_database(ctx: Context) -> None:
    url = ctx.settings.redis_url
    job_id = await make_job(ctx, "true")
    token = await _minted(ctx, job_id)
    await job_users.grant(ctx, job_id, token)
    assert _signs_in(url, job_id, token)
    # Redis restarted without its data: the users, the relayed set and the cursors are gone
    await ctx.redis.execute_command("ACL", "DELUSER", job_redis_users.user_name(job_id))
    await ctx.redis.delete(streams.RELAYED_JOBS, streams.RELAY_CURSORS)
    assert not _signs_in(url, job_id, token)
    assert job_id in (await job_users.sync(ctx)).grant
    assert _signs_in(url, job_id, token)
    assert (await job_redis_users.arelayed(ctx.redis))[job_id] == 0
    async with ctx.sessions.begin() as session:
        await job_credentials.revoke(session, job_id)
    assert (await job_users.sync(ctx)).revoke == (job_id,)


async def test_events_are_relayed_once_each_as_their_own_jobs(
    redis_url: str, relay_redis: aioredis.Redis
) -> None:
    own, other = f"training-{secrets.token_hex(4)}", f"training-{secrets.token_hex(4)}"
    token = "dlaasjob_" + secrets.token_hex(16)
    await job_redis_users.agrant(relay_redis, own, [job_credentials.hash_job_token(token)])
    learner = redis.Redis.from_url(job_redis_users.learner_url(redis_url, own, token))
    relays = [EventRelay(relay_redis), EventRelay(relay_redis)]
    try:
        for n in range(150):
            learner.xadd(streams.events_key(own), _event(other, n % 3 + 1, n=str(n)))

        async def relayed_all() -> bool:
            await asyncio.gather(*(relay.step(block_ms=None) for relay in relays))
            return len(await _relayed_of(relay_redis, own)) >= 150

        await harness.eventually(relayed_all, 10, "150 events relayed")
        entries = await _relayed_of(relay_redis, own)
        assert sorted(int(fields[b"n"]) for fields in entries) == list(range(150))
        assert not await _relayed_of(relay_redis, other)  # the job claimed was not believed
        # what was relayed left the job's own stream
        assert await relay_redis.xlen(streams.events_key(own)) <= 1
    finally:
        learner.close()
        await job_redis_users.arevoke(relay_redis, [own], 1.0)


async def test_a_job_granted_while_the_relay_waits_is_relayed_at_once(
    redis_url: str, relay_redis: aioredis.Redis
) -> None:
    relay = EventRelay(relay_redis)
    await relay.step(block_ms=None)  # past any earlier wake-up
    job_id = f"training-{secrets.token_hex(4)}"
    waiting = asyncio.create_task(relay.step(block_ms=30_000))
    await asyncio.sleep(0)
    await job_redis_users.agrant(relay_redis, job_id, [], acl=False)
    await asyncio.wait_for(waiting, 10)  # woken by the grant, not by its 30 s timeout
    await relay_redis.xadd(streams.events_key(job_id), _event(job_id, 1))
    assert await asyncio.wait_for(relay.step(block_ms=30_000), 10) == 1
    assert len(await _relayed_of(relay_redis, job_id)) == 1
    await job_redis_users.arevoke(relay_redis, [job_id], 1.0, acl=False)


async def test_a_flooding_job_waits_its_turn_and_a_revoked_job_is_forgotten(
    relay_redis: aioredis.Redis,
) -> None:
    now = [1_000_000.0]
    relay = EventRelay(relay_redis, clock=lambda: now[0], budget_per_s=5, grace_s=60)
    job_id = f"training-{secrets.token_hex(4)}"
    await job_redis_users.agrant(relay_redis, job_id, [], acl=False)
    for n in range(12):
        await relay_redis.xadd(streams.events_key(job_id), _event(job_id, 1, n=str(n)))
    while await relay.step(block_ms=None):
        pass
    # the flood got its budget of this second, and waits
    assert len(await _relayed_of(relay_redis, job_id)) == 5
    assert await relay.step(block_ms=None) == 0
    for second in (1, 2):
        now[0] += 1
        while await relay.step(block_ms=None):
            pass
        assert len(await _relayed_of(relay_redis, job_id)) == min(12, 5 + 5 * second)

    await job_redis_users.arevoke(relay_redis, [job_id], now[0], acl=False)
    await relay_redis.xadd(streams.events_key(job_id), _event(job_id, 1, n="late"))
    now[0] += 61
    await relay.step(block_ms=None)  # forwards what is left, then forgets the job
    assert len(await _relayed_of(relay_redis, job_id)) == 13
    assert job_id not in await job_redis_users.arelayed(relay_redis)
    assert not await relay_redis.hexists(streams.RELAY_CURSORS, job_id)


async def test_a_job_that_adds_past_its_caps_is_brought_back_each_pass(ctx: Context) -> None:
    url = ctx.settings.redis_url
    job_id = await make_job(ctx, "true")
    token = await _minted(ctx, job_id)
    await job_users.sync(ctx)
    job = redis.Redis.from_url(job_redis_users.learner_url(url, job_id, token))
    try:
        flood = job.pipeline(transaction=False)
        for n in range(3 * streams.LOGS_MAXLEN):
            flood.xadd(streams.logs_key(job_id), {"lines": f"line {n}"})  # no MAXLEN
        flood.execute()
        assert job.xlen(streams.logs_key(job_id)) == 3 * streams.LOGS_MAXLEN
        await job_users.sync(ctx)
        # approximately trimmed, as the platform's own adds keep it: whole nodes of entries
        kept = job.xlen(streams.logs_key(job_id))
        assert streams.LOGS_MAXLEN <= kept < streams.LOGS_MAXLEN + 200, kept
        newest = await ctx.redis.xrevrange(streams.logs_key(job_id), count=1)
        assert newest[0][1][b"lines"] == f"line {3 * streams.LOGS_MAXLEN - 1}".encode()
    finally:
        job.close()
