"""What one job may hold in Redis, whoever wrote it.

A job's learners sign in as the job's own ACL user (`storage.job_redis_users`), which may
XADD to the job's streams and HSET its heartbeats. Redis's ACLs cannot make an XADD carry a
MAXLEN, so a program that got hold of its job's credentials could grow its streams without
end (the platform's own adds cap them: `streams.LOGS_MAXLEN` and the others). The monitor
therefore brings every live job's keys back within bounds every second (`abound_jobs`):
each stream is trimmed to the length the platform keeps, and a key still larger than its
bound in bytes is deleted (a job's live log is a view: its stored log keeps every line).
Between two passes Redis's own `maxmemory` with the `noeviction` policy holds: a flood is
refused, never allowed to evict the platform's keys.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Final

from storage import streams

if TYPE_CHECKING:
    from redis.asyncio import Redis as AsyncRedis

MiB: Final = 1024 * 1024
# The platform's own adds keep a log or metric stream under about 64 MB
# (`streams.LOGS_MAXLEN` entries of at most `streams.BATCH_BYTES`); the bounds leave room
# for Redis's own overhead and a few longer lines.
LOGS_MAX_BYTES: Final = 96 * MiB
METRICS_MAX_BYTES: Final = 96 * MiB
EVENTS_MAX_BYTES: Final = 16 * MiB
HEARTBEATS_MAX_BYTES: Final = 1 * MiB


def stream_caps(job_id: str) -> dict[str, int]:
    """The job's streams and the lengths the platform's own adds keep them at."""
    return {
        streams.logs_key(job_id): streams.LOGS_MAXLEN,
        streams.metrics_key(job_id): streams.METRICS_MAXLEN,
        streams.events_key(job_id): streams.JOB_EVENTS_MAXLEN,
    }


def byte_bounds(job_id: str) -> dict[str, int]:
    """Each of the job's keys (`streams.job_keys`) and the bytes it may take in Redis."""
    return {
        streams.logs_key(job_id): LOGS_MAX_BYTES,
        streams.metrics_key(job_id): METRICS_MAX_BYTES,
        streams.events_key(job_id): EVENTS_MAX_BYTES,
        streams.heartbeats_key(job_id): HEARTBEATS_MAX_BYTES,
    }


def over_bounds(usage: Mapping[str, int | None], bounds: Mapping[str, int]) -> list[str]:
    """The keys that take more bytes than their bounds (None: the key does not exist)."""
    return [key for key, used in usage.items() if used is not None and used > bounds[key]]


async def abound_jobs(redis: AsyncRedis, job_ids: Sequence[str]) -> dict[str, list[str]]:
    """Trim the jobs' streams to the platform's caps, then delete any of their keys still
    over its byte bound; returns the deleted keys by job."""
    if not job_ids:
        return {}
    pipe = redis.pipeline(transaction=False)
    for job_id in job_ids:
        for key, cap in stream_caps(job_id).items():
            pipe.xtrim(key, maxlen=cap, approximate=True)
    await pipe.execute()
    bounds = {job_id: byte_bounds(job_id) for job_id in job_ids}
    pipe = redis.pipeline(transaction=False)
    for job_id in job_ids:
        for key in bounds[job_id]:
            pipe.memory_usage(key, samples=0)
    used = iter(await pipe.execute())
    deleted: dict[str, list[str]] = {}
    for job_id in job_ids:
        usage = {key: next(used) for key in bounds[job_id]}
        over = over_bounds(usage, bounds[job_id])
        if over:
            deleted[job_id] = over
    if deleted:
        await redis.delete(*(key for keys in deleted.values() for key in keys))
    return deleted
