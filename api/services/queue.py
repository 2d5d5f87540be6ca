"""The queue the last scheduling pass published (`storage.queue_view`), as the caller may see
it: only their teams' jobs (a platform admin's: all), each keeping its place in the whole
queue, a page at a time by place."""

from __future__ import annotations

from redis.asyncio import Redis
from sqlalchemy.ext.asyncio import AsyncSession

from api.auth import Principal
from api.pagination import PageRequest, id_cursor, id_position, split_page
from api.queue_schemas import QueuedJobPublic, QueueList
from api.services.lists import wanted_team_ids
from storage import job_listing
from storage.job_states import FINAL_STATES, JobState
from storage.models import Job
from storage.queue_view import QueuedJob, aread_queue

# how many of the queue's jobs one query reads while filling a page
_BATCH = 500


def _still_waits(job: Job | None, team_ids: frozenset[int] | None) -> bool:
    if job is None or JobState(job.state) in FINAL_STATES:
        return False
    return team_ids is None or job.team_id in team_ids


async def queue_page(
    session: AsyncSession, redis: Redis, user: Principal, team: str | None, page: PageRequest
) -> QueueList:
    view = await aread_queue(redis)
    if view is None:
        return QueueList(at=None, jobs=[], next=None)
    after = id_position("queue", page.cursor) if page.cursor is not None else 0
    team_ids = await wanted_team_ids(session, user, team)
    waiting = sorted((q for q in view.jobs if q.position > after), key=lambda q: q.position)
    found: list[tuple[QueuedJob, Job]] = []
    if team_ids == frozenset():
        waiting = []
    for start in range(0, len(waiting), _BATCH):
        batch = waiting[start : start + _BATCH]
        jobs = await job_listing.jobs_by_id(session, [queued.job_id for queued in batch])
        found.extend(
            (queued, jobs[queued.job_id])
            for queued in batch
            if _still_waits(jobs.get(queued.job_id), team_ids)
        )
        if len(found) > page.limit:
            break
    shown, more = split_page(found, page.limit)
    owners, teams = await job_listing.owner_and_team_names(session, [job for _, job in shown])
    return QueueList(
        at=view.at,
        jobs=[
            QueuedJobPublic(
                id=job.id,
                name=job.name,
                team=teams[job.team_id],
                owner=owners[job.owner_id],
                position=queued.position,
                cause=queued.cause,
                reason=queued.reason,
                estimated_start=queued.estimated_start,
                submitted_at=job.created_at,
            )
            for queued, job in shown
        ],
        next=id_cursor("queue", shown[-1][0].position) if more else None,
    )
