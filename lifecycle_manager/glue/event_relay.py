"""The event relay: moves each job's learner events from the job's own stream
(`dlaas:job:{id}:events`, the only event stream its learners may write) into the shared
`dlaas:learner-events` that the monitor reads, with `job` set from the stream's key, so the
code of one job cannot report for another.

One Lua script forwards a job's new entries, advances the job's cursor and trims what it
forwarded, atomically: an event is relayed once even with several relays at work (one per
monitor) or one that dies mid-way. The relay waits for new entries on the streams of every
job in `dlaas:relayed-jobs` (and on `dlaas:relay-wake`, which a grant writes to) with one
blocking XREAD, so an event is relayed within milliseconds. A job's stream is relayed from
its grant until `GRACE_S` after its Redis user was revoked (what was sent before counts);
then its last entries are forwarded and the job is forgotten. At most `BUDGET_PER_S` events
of one job are relayed a second: a flood from one job's code waits in its own stream and
cannot crowd others' events out of the shared one.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Final

from redis.exceptions import RedisError

from storage import job_redis_users, streams

if TYPE_CHECKING:
    from redis.asyncio import Redis as AsyncRedis

log = logging.getLogger("dlaas.event_relay")

GRACE_S: Final = 60.0
BUDGET_PER_S: Final = 1000
BATCH: Final = 100
BLOCK_MS: Final = 1000
# How often the relayed set and cursors are read again without a wake-up (revocations, and
# other relays' progress).
REFRESH_S: Final = 1.0

# KEYS: the job's stream, the shared stream, the cursors hash; ARGV: job id, batch, maxlen.
FORWARD = """
local last = redis.call('HGET', KEYS[3], ARGV[1]) or '0-0'
local entries = redis.call('XRANGE', KEYS[1], '(' .. last, '+', 'COUNT', tonumber(ARGV[2]))
for _, entry in ipairs(entries) do
  local fields = entry[2]
  local out = {'job', ARGV[1]}
  for i = 1, #fields, 2 do
    if fields[i] ~= 'job' then
      out[#out + 1] = fields[i]
      out[#out + 1] = fields[i + 1]
    end
  end
  redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[3], '*', unpack(out))
  last = entry[1]
end
if #entries > 0 then
  redis.call('HSET', KEYS[3], ARGV[1], last)
  redis.call('XTRIM', KEYS[1], 'MINID', last)
end
return {#entries, last}
"""


def relaying(relayed: dict[str, float], now: float, grace_s: float = GRACE_S) -> list[str]:
    """Jobs whose streams are relayed now: granted, or revoked less than `grace_s` ago."""
    return [job for job, revoked in relayed.items() if revoked == 0 or revoked > now - grace_s]


def expired(relayed: dict[str, float], now: float, grace_s: float = GRACE_S) -> list[str]:
    return [job for job, revoked in relayed.items() if 0 < revoked <= now - grace_s]


class EventRelay:
    def __init__(
        self,
        redis: AsyncRedis,
        *,
        clock: Callable[[], float] = time.time,
        grace_s: float = GRACE_S,
        budget_per_s: int = BUDGET_PER_S,
    ) -> None:
        self.redis = redis
        self.clock = clock
        self.grace_s = grace_s
        self.budget_per_s = budget_per_s
        self._forward = redis.register_script(FORWARD)
        self._wake_after = "0-0"
        self._window = 0
        self._spent: dict[str, int] = {}
        self._relayed: dict[str, float] = {}
        self._read_at = -math.inf
        self._after: dict[str, str] = {}  # job -> id of its last event relayed

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            try:
                await self.step()
            except (RedisError, OSError) as error:
                log.warning("event relay: %s; retrying", error)
                self._read_at = -math.inf
                await asyncio.sleep(1)

    async def step(self, block_ms: int | None = BLOCK_MS) -> int:
        """Wait (up to `block_ms`) for new events of any relayed job, and relay them; how
        many were relayed."""
        now = self.clock()
        if now - self._read_at >= REFRESH_S:
            await self._read_relayed(now)
        jobs = [
            job
            for job in relaying(self._relayed, now, self.grace_s)
            if self._allowance(job, now) > 0
        ]
        wanted: dict[Any, Any] = {streams.RELAY_WAKE: self._wake_after}
        wanted.update({streams.events_key(job): self._after.get(job, "0-0") for job in jobs})
        answer = await self.redis.xread(wanted, count=1, block=block_ms)
        by_key = {streams.events_key(job): job for job in jobs}
        woken = []
        for key, entries in streams.streams_of(answer):
            name = streams.as_text(key)
            if name == streams.RELAY_WAKE and entries:
                self._wake_after = streams.as_text(entries[-1][0])
                self._read_at = -math.inf  # a job was granted: read the set on the next step
            elif name in by_key:
                woken.append(by_key[name])
        return await self._relay(woken)

    async def _read_relayed(self, now: float) -> None:
        """The relayed set and every job's cursor as Redis has them; forget jobs whose grace
        after their revocation is over."""
        self._relayed = await job_redis_users.arelayed(self.redis)
        gone = expired(self._relayed, now, self.grace_s)
        await self._forget(gone)
        for job in gone:
            self._relayed.pop(job, None)
        self._after = await self._cursors(list(self._relayed))
        self._read_at = now

    async def relay_all(self) -> int:
        """Relay every waiting event of every relayed job, without waiting (on stopping)."""
        relayed = await job_redis_users.arelayed(self.redis)
        return await self._relay(relaying(relayed, self.clock(), self.grace_s))

    async def forward(self, job_id: str, limit: int = BATCH) -> int:
        """Relay up to `limit` of the job's waiting events; how many."""
        keys = [streams.events_key(job_id), streams.LEARNER_EVENTS, streams.RELAY_CURSORS]
        args: list[str | int] = [job_id, limit, streams.LEARNER_EVENTS_MAXLEN]
        count, last = await self._forward(keys=keys, args=args)
        self._after[job_id] = streams.as_text(last)
        return int(count)

    async def _relay(self, jobs: Sequence[str]) -> int:
        sent = 0
        for job in jobs:
            allowance = self._allowance(job, self.clock())
            if allowance > 0:
                count = await self.forward(job, min(BATCH, allowance))
                self._spent[job] = self._spent.get(job, 0) + count
                sent += count
        return sent

    def _allowance(self, job: str, now: float) -> int:
        """How many more of the job's events may be relayed in this second."""
        if int(now) != self._window:
            self._window, self._spent = int(now), {}
        return self.budget_per_s - self._spent.get(job, 0)

    async def _cursors(self, jobs: Sequence[str]) -> dict[str, str]:
        if not jobs:
            return {}
        answer = await self.redis.hmget(streams.RELAY_CURSORS, list(jobs))
        return {
            job: streams.as_text(cursor) if cursor else "0-0"
            for job, cursor in zip(jobs, answer, strict=True)
        }

    async def _forget(self, jobs: Sequence[str]) -> None:
        """Relay what is left of jobs revoked `grace_s` ago, then stop relaying them."""
        if not jobs:
            return
        await self._relay(jobs)
        for job in jobs:
            self._after.pop(job, None)
        pipe = self.redis.pipeline(transaction=True)
        pipe.zrem(streams.RELAYED_JOBS, *jobs)
        pipe.hdel(streams.RELAY_CURSORS, *jobs)
        await pipe.execute()
