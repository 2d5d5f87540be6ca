"""What the platform stops keeping once its retention has passed (run by the beat schedule).

- answers kept for retries of POSTs sent with an `Idempotency-Key`, after
  `idempotency_retention_s`;
- model archives of submissions that died between storing the archive and writing the job
  row (`storage.pending_archives`), `orphan_archive_after_s` after they were stored;
- live streams of finished jobs that were never set to expire, and of jobs halted for
  `halted_streams_after_s` (their stored log and metrics hold every line; a job deployed
  again takes the expiry back), and streams of jobs that do not exist;
- events of finished jobs older than `event_retention_s` (the job's row keeps its end);
- rows of deleted jobs, with their events and learners, `deleted_job_retention_s` after the
  deletion (the API answers 404 for them from the start).

Each part is idempotent and bounded by what there is to collect, not by how much the
platform ever held: streams are found by a Redis scan of the keys still there.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import delete, select

from lifecycle_manager.glue.context import Context
from storage import idempotency, pending_archives, streams
from storage.job_states import FINAL_STATES, JobState
from storage.models import Job, JobEvent

log = logging.getLogger(__name__)

_STREAM_PATTERN = "dlaas:job:*"
_SCAN_COUNT = 500
_BATCH = 500


@dataclass(frozen=True)
class Collected:
    idempotent_requests: int = 0
    orphan_archives: int = 0
    streams_retired: int = 0
    deleted_jobs: int = 0
    old_events: int = 0

    def __str__(self) -> str:
        return (
            f"forgot {self.idempotent_requests} idempotency key(s), removed "
            f"{self.orphan_archives} orphaned archive(s), retired {self.streams_retired} "
            f"job stream(s), dropped {self.deleted_jobs} deleted job row(s) and "
            f"{self.old_events} old event(s)"
        )


async def collect(ctx: Context) -> Collected:
    settings = ctx.settings
    async with ctx.sessions() as session, session.begin():
        forgotten = await idempotency.purge(
            session, timedelta(seconds=settings.idempotency_retention_s), ctx.clock()
        )
    return Collected(
        idempotent_requests=forgotten,
        orphan_archives=await collect_orphan_archives(ctx),
        streams_retired=await retire_forgotten_streams(ctx),
        deleted_jobs=await drop_deleted_jobs(ctx),
        old_events=await drop_old_events(ctx),
    )


async def _existing_jobs(ctx: Context, job_ids: list[str]) -> dict[str, tuple[str, datetime]]:
    """The state of each of `job_ids` that has a row, and when it last changed."""
    found: dict[str, tuple[str, datetime]] = {}
    async with ctx.sessions() as session:
        for start in range(0, len(job_ids), _BATCH):
            rows = await session.execute(
                select(Job.id, Job.state, Job.updated_at).where(
                    Job.id.in_(job_ids[start : start + _BATCH])
                )
            )
            found.update({job_id: (state, updated) for job_id, state, updated in rows.all()})
    return found


async def collect_orphan_archives(ctx: Context) -> int:
    noted = await pending_archives.older_than(
        ctx.redis, ctx.settings.orphan_archive_after_s, ctx.clock().timestamp()
    )
    if not noted:
        return 0
    existing = await _existing_jobs(ctx, noted)
    removed = 0
    for job_id in noted:
        if job_id not in existing:
            await asyncio.to_thread(ctx.objects.delete_prefix, f"jobs/{job_id}/")
            log.info("removed the archive of submission %s, which has no job", job_id)
            removed += 1
        await pending_archives.forget(ctx.redis, job_id)
    return removed


def _job_of_stream(key: str) -> str | None:
    parts = key.split(":")
    return parts[2] if len(parts) == 4 else None


async def retire_forgotten_streams(ctx: Context) -> int:
    """Set the streams of finished jobs that have no expiry to expire, and delete those of
    jobs that do not exist; the number of streams changed."""
    without_expiry: dict[str, list[str]] = {}
    async for raw in ctx.redis.scan_iter(match=_STREAM_PATTERN, count=_SCAN_COUNT):
        key = raw.decode() if isinstance(raw, bytes) else str(raw)
        job_id = _job_of_stream(key)
        if job_id is not None and await ctx.redis.ttl(key) == -1:
            without_expiry.setdefault(job_id, []).append(key)
    if not without_expiry:
        return 0
    existing = await _existing_jobs(ctx, list(without_expiry))
    changed = 0
    for job_id, keys in without_expiry.items():
        if job_id not in existing:
            changed += int(await ctx.redis.delete(*keys))
            continue
        state, updated = existing[job_id]
        halted_long = (
            state == JobState.HALTED and ctx.age(updated) > ctx.settings.halted_streams_after_s
        )
        if state in FINAL_STATES or halted_long:
            await streams.aretire_job_streams(ctx.redis, job_id)
            changed += len(keys)
    return changed


async def drop_old_events(ctx: Context) -> int:
    """Events of finished jobs older than the retention (the job's row keeps its end)."""
    cutoff = ctx.clock() - timedelta(seconds=ctx.settings.event_retention_s)
    finished = select(Job.id).where(Job.state.in_([str(s) for s in FINAL_STATES]))
    async with ctx.sessions() as session, session.begin():
        result = await session.execute(
            delete(JobEvent).where(JobEvent.time < cutoff, JobEvent.job_id.in_(finished))
        )
    return int(getattr(result, "rowcount", 0) or 0)


async def drop_deleted_jobs(ctx: Context) -> int:
    cutoff = ctx.clock() - timedelta(seconds=ctx.settings.deleted_job_retention_s)
    async with ctx.sessions() as session, session.begin():
        result = await session.execute(
            delete(Job).where(Job.deleted_at.is_not(None), Job.deleted_at < cutoff)
        )
    return int(getattr(result, "rowcount", 0) or 0)
