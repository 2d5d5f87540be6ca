"""The scheduler's lease: one scheduling pass at a time across the workers, and a worker
that dies holding it holds the others up for seconds, not for a minute.

    acquire   SET lease NX PX 3000 and INCR the fencing token, in one Lua script: the
              holder's token is larger than any handed out before it
    renew     every second while the pass runs, PEXPIRE the lease only if it still holds
              the holder's value (a Lua compare); a renewal that finds it gone or taken
              cancels the pass, which raises LeaseLost
    release   DEL the lease only if it is still the holder's

A caller that finds the lease held tries again every `POLL_EVERY_S` for `WAIT_AT_MOST_S`,
long enough to outlast a dead holder's lease, then gives up (LeaseBusy): the caller's own
retry, or the periodic sweep, runs the pass later.

The lease alone cannot keep a stale holder out: a worker paused past the lease's expiry
(a long GC, a stopped VM) resumes believing it holds it. Its writes are what must be
refused, so each pass claims its token in its database transaction
(`storage.scheduler_fence`); a pass refused there hands the newest token to `raise_floor`,
so that a token counter lost with Redis's data starts above it again.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import TypeVar

import redis.asyncio as aioredis

from storage.scheduler_fence import StaleToken

log = logging.getLogger(__name__)
T = TypeVar("T")

LEASE_KEY = "dlaas:scheduler-lease"
TOKEN_KEY = "dlaas:scheduler-fencing-token"  # never expires: tokens only grow
# A dead holder keeps every other pass waiting this long at most. It is well under the 5 s
# a worker killed mid-pass may delay the next admission, and three renewals long, so that
# a live holder whose event loop or Redis answers late once or twice still keeps it.
LEASE_TTL_S = 3.0
RENEW_EVERY_S = 1.0  # a third of the TTL: two renewals in a row may fail or come late
POLL_EVERY_S = 0.1  # a waiting caller's tries: a dead holder's lease is taken within this
# Longer than the lease lives, so that a caller waiting on a dead holder takes over.
WAIT_AT_MOST_S = LEASE_TTL_S + 2.0

_ACQUIRE = """
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
    return redis.call('INCR', KEYS[2])
end
return false
"""
_RENEW = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
    return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
"""
_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
    return redis.call('DEL', KEYS[1])
end
return 0
"""
_RAISE_FLOOR = """
if tonumber(redis.call('GET', KEYS[1]) or '0') < tonumber(ARGV[1]) then
    redis.call('SET', KEYS[1], ARGV[1])
end
return redis.call('GET', KEYS[1])
"""


class LeaseBusy(Exception):
    """Another holder kept the lease for as long as the caller would wait."""


class LeaseLost(Exception):
    """The lease expired or was taken while its holder worked under it."""


@dataclass(frozen=True)
class Lease:
    holder: str  # the value the lease key holds while it is this holder's
    token: int  # the fencing token: larger than that of every holder before


@dataclass(frozen=True)
class LeaseTimings:
    ttl_s: float = LEASE_TTL_S
    renew_every_s: float = RENEW_EVERY_S
    poll_every_s: float = POLL_EVERY_S
    wait_at_most_s: float = WAIT_AT_MOST_S

    @property
    def ttl_ms(self) -> int:
        return int(self.ttl_s * 1000)


def _script(redis: aioredis.Redis, source: str) -> Callable[..., Awaitable[object]]:
    return redis.register_script(source)


async def try_acquire(
    redis: aioredis.Redis, timings: LeaseTimings = LeaseTimings()
) -> Lease | None:
    """The lease with a new fencing token, or None if another holds it."""
    holder = secrets.token_hex(16)
    token = await _script(redis, _ACQUIRE)(
        keys=[LEASE_KEY, TOKEN_KEY], args=[holder, timings.ttl_ms]
    )
    return None if token is None else Lease(holder, int(str(token)))


async def acquire(redis: aioredis.Redis, timings: LeaseTimings = LeaseTimings()) -> Lease:
    """The lease, waiting for it up to `timings.wait_at_most_s` (raises LeaseBusy)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timings.wait_at_most_s
    while (lease := await try_acquire(redis, timings)) is None:
        if loop.time() >= deadline:
            raise LeaseBusy(f"the scheduler's lease stayed held for {timings.wait_at_most_s:g} s")
        await asyncio.sleep(timings.poll_every_s)
    return lease


async def renew(
    redis: aioredis.Redis, lease: Lease, timings: LeaseTimings = LeaseTimings()
) -> bool:
    """Extend the lease by its TTL from now; False if it is no longer `lease`'s."""
    renewed = await _script(redis, _RENEW)(keys=[LEASE_KEY], args=[lease.holder, timings.ttl_ms])
    return bool(renewed)


async def release(redis: aioredis.Redis, lease: Lease) -> None:
    """Give the lease up, if it is still `lease`'s."""
    await _script(redis, _RELEASE)(keys=[LEASE_KEY], args=[lease.holder])


async def raise_floor(redis: aioredis.Redis, token: int) -> None:
    """Make every token handed out from now larger than `token` (one that wrote already)."""
    await _script(redis, _RAISE_FLOOR)(keys=[TOKEN_KEY], args=[token])


@dataclass
class _Keeper:
    """Renews a lease while the task working under it runs; cancels that task when the
    lease is lost."""

    redis: aioredis.Redis
    lease: Lease
    timings: LeaseTimings
    worker: asyncio.Task[object]
    inside: bool = True  # the worker is still in the body that the lease guards
    lost: bool = False

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        kept_at = loop.time()  # the lease lives a TTL from here at least
        while True:
            await asyncio.sleep(self.timings.renew_every_s)
            sent = loop.time()
            try:
                # A renewal answered after the lease would have lapsed is no renewal.
                async with asyncio.timeout(kept_at + self.timings.ttl_s - sent):
                    kept = await renew(self.redis, self.lease, self.timings)
            except (aioredis.RedisError, TimeoutError) as error:
                log.warning("scheduler lease %d: renewal failed: %r", self.lease.token, error)
                # Unrenewed for a whole TTL, it is gone as far as anyone can tell.
                if loop.time() - kept_at < self.timings.ttl_s:
                    continue
                kept = False
            if kept:
                kept_at = sent
                continue
            log.warning("scheduler lease %d: lost; abandoning the pass", self.lease.token)
            self.lost = True
            if self.inside:
                self.worker.cancel()
            return


@asynccontextmanager
async def held(
    redis: aioredis.Redis, timings: LeaseTimings = LeaseTimings()
) -> AsyncIterator[Lease]:
    """The lease while the body runs, renewed; LeaseBusy if it could not be had, LeaseLost
    (the body cancelled) if it was lost on the way."""
    lease = await acquire(redis, timings)
    worker = asyncio.current_task()
    assert worker is not None
    keeper = _Keeper(redis, lease, timings, worker)
    renewing = asyncio.create_task(keeper.run())
    try:
        yield lease
    except asyncio.CancelledError:
        keeper.inside = False
        if keeper.lost and worker.uncancel() == 0:
            raise LeaseLost(f"the scheduler's lease {lease.token} was lost") from None
        raise
    finally:
        keeper.inside = False  # before any await: the keeper cancels only the body
        renewing.cancel()
        await asyncio.gather(renewing, return_exceptions=True)
        if not keeper.lost:
            try:
                await release(redis, lease)
            except aioredis.RedisError as error:  # it lapses by itself within its TTL
                log.warning("scheduler lease %d: release failed: %s", lease.token, error)


async def run_fenced(
    redis: aioredis.Redis,
    what: str,
    work: Callable[[int], Awaitable[T]],
    timings: LeaseTimings = LeaseTimings(),
) -> T | None:
    """`work(token)` under the lease, whose transaction claims `token` at the fence; None
    if it did not run (the lease busy or lost) or was refused (StaleToken): then nothing it
    decided was applied."""
    try:
        async with held(redis, timings) as lease:
            return await work(lease.token)
    except (LeaseBusy, LeaseLost) as error:
        log.warning("%s: not run: %s", what, error)
    except StaleToken as refused:
        # A newer holder wrote. Tokens handed out from now start above the newest, should
        # Redis have lost its counter (a restart without persistence).
        log.warning("%s: refused: %s", what, refused)
        await raise_floor(redis, refused.newest)
    return None
