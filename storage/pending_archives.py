"""Model archives stored for a submission whose job row may not exist (yet, or ever).

The API notes a job id here before it stores the archive and takes the note away once the
job row is committed. A note still there well after that belongs to a submission that died
in between (a crash, a lost database): the lifecycle manager removes its archive.
"""

from __future__ import annotations

import time
from typing import Final

from redis.asyncio import Redis

KEY: Final = "dlaas:archives-pending"


async def note(redis: Redis, job_id: str, now: float | None = None) -> None:
    await redis.zadd(KEY, {job_id: time.time() if now is None else now})


async def forget(redis: Redis, job_id: str) -> None:
    await redis.zrem(KEY, job_id)


async def older_than(redis: Redis, age_s: float, now: float | None = None) -> list[str]:
    """Job ids noted more than `age_s` seconds ago, oldest first."""
    cutoff = (time.time() if now is None else now) - age_s
    return [
        m.decode() if isinstance(m, bytes) else str(m)
        for m in await redis.zrangebyscore(KEY, "-inf", cutoff)
    ]
