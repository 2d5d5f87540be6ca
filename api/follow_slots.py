"""How many log follows a user holds open at once, counted across every API worker.

A follow takes a slot in the user's Redis sorted set (member: the follow, score: when the
slot lapses), keeps it alive while it streams and gives it back when it ends. A slot whose
follow vanished without giving it back (a killed worker) lapses after `SLOT_TTL_S`.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from redis.asyncio import Redis

SLOT_TTL_S = 60.0
REFRESH_EVERY_S = 15.0
_PREFIX = "dlaas:follows:"

# KEYS[1]: the user's slots; ARGV: limit, member, ttl. 1 if the slot was taken.
_TAKE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[1]) then return 0 end
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[3]), ARGV[2])
redis.call('PEXPIRE', KEYS[1], math.ceil(tonumber(ARGV[3]) * 1000))
return 1
"""
# KEYS[1]: the user's slots; ARGV: member, ttl. Pushes the slot's lapse back.
_KEEP = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
redis.call('ZADD', KEYS[1], 'XX', now + tonumber(ARGV[2]), ARGV[1])
redis.call('PEXPIRE', KEYS[1], math.ceil(tonumber(ARGV[2]) * 1000))
return 1
"""


@dataclass
class FollowSlot:
    redis: Redis
    key: str
    member: str
    kept_at: float = field(default_factory=time.monotonic)

    async def keep_alive(self) -> None:
        """Push the slot's lapse back (at most every `REFRESH_EVERY_S`)."""
        now = time.monotonic()
        if now - self.kept_at < REFRESH_EVERY_S:
            return
        self.kept_at = now
        await self.redis.eval(_KEEP, 1, self.key, self.member, str(SLOT_TTL_S))

    async def give_back(self) -> None:
        await self.redis.zrem(self.key, self.member)


async def take_slot(redis: Redis, user_id: int, limit: int) -> FollowSlot | None:
    """A slot for one more follow of the user's, or None at the limit."""
    key = f"{_PREFIX}{user_id}"
    member = secrets.token_hex(8)
    taken = await redis.eval(_TAKE, 1, key, str(limit), member, str(SLOT_TTL_S))
    return FollowSlot(redis, key, member) if int(taken) == 1 else None


async def holding(slot: FollowSlot, events: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    """`events`, with the slot given back when they end (or the client goes away)."""
    try:
        async for chunk in events:
            yield chunk
    finally:
        await slot.give_back()
