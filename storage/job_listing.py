"""Paged reads of jobs and their events: keyset queries that start where a page ended.

Jobs are listed newest first, ordered by (created_at, id) descending, so jobs created in
the same instant keep one order; `ix_jobs_team_created_id` serves a team's list and
`ix_jobs_owner_created_id` a user's. A job's
events are listed oldest first by id (`ix_job_events_job_id_id`). Each query asks for one
row more than a page holds, so the caller knows whether another page follows.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

from sqlalchemy import Select, select, tuple_
from sqlalchemy.ext.asyncio import AsyncSession

from storage.job_states import JobState
from storage.models import Job, JobEvent, Team, User


@dataclass(frozen=True)
class JobPosition:
    """Where a page of jobs ended: the last job's creation time and id."""

    created_at: datetime
    job_id: str


@dataclass(frozen=True)
class JobFilter:
    """Which jobs to list; every condition given must hold."""

    team_ids: Collection[int] | None = None  # None: every team's
    owner_id: int | None = None
    states: Collection[JobState] = field(default_factory=frozenset)
    name_contains: str | None = None  # case-insensitive
    created_before: datetime | None = None
    created_after: datetime | None = None


def _utc(moment: datetime) -> datetime:
    """SQLite stores times without their zone, all in UTC: compare in UTC (a naive time is
    taken to be UTC)."""
    return moment.astimezone(UTC) if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def _jobs_query(wanted: JobFilter) -> Select[Job]:
    query = select(Job).where(Job.deleted_at.is_(None))
    if wanted.team_ids is not None:
        query = query.where(Job.team_id.in_(sorted(wanted.team_ids)))
    if wanted.owner_id is not None:
        query = query.where(Job.owner_id == wanted.owner_id)
    if wanted.states:
        query = query.where(Job.state.in_(sorted(str(s) for s in wanted.states)))
    if wanted.name_contains:
        query = query.where(Job.name.icontains(wanted.name_contains, autoescape=True))
    if wanted.created_before is not None:
        query = query.where(Job.created_at < _utc(wanted.created_before))
    if wanted.created_after is not None:
        query = query.where(Job.created_at > _utc(wanted.created_after))
    return query


async def jobs_after(
    session: AsyncSession, wanted: JobFilter, after: JobPosition | None, count: int
) -> Sequence[Job]:
    """Up to `count` of the jobs `wanted` describes, newest first, past `after`."""
    query = _jobs_query(wanted)
    if after is not None:
        last = (_utc(after.created_at), after.job_id)
        query = query.where(tuple_(Job.created_at, Job.id) < last)
    query = query.order_by(Job.created_at.desc(), Job.id.desc()).limit(count)
    return (await session.execute(query)).scalars().all()


async def events_after(
    session: AsyncSession, job_id: str, after_id: int | None, count: int
) -> Sequence[JobEvent]:
    """Up to `count` of the job's events, oldest first, those after event `after_id`."""
    query = select(JobEvent).where(JobEvent.job_id == job_id)
    if after_id is not None:
        query = query.where(JobEvent.id > after_id)
    query = query.order_by(JobEvent.id).limit(count)
    return (await session.execute(query)).scalars().all()


async def owner_and_team_names(
    session: AsyncSession, jobs: Sequence[Job]
) -> tuple[dict[int, str], dict[int, str]]:
    """The names of the jobs' owners and of their teams, by id."""
    if not jobs:
        return {}, {}
    owners = await session.execute(
        select(User.id, User.name).where(User.id.in_({job.owner_id for job in jobs}))
    )
    teams = await session.execute(
        select(Team.id, Team.name).where(Team.id.in_({job.team_id for job in jobs}))
    )
    return {i: name for i, name in owners.all()}, {i: name for i, name in teams.all()}


async def jobs_by_id(session: AsyncSession, job_ids: Collection[str]) -> dict[str, Job]:
    """The jobs of these ids that exist and are not deleted, by id."""
    if not job_ids:
        return {}
    query = select(Job).where(Job.id.in_(sorted(set(job_ids))), Job.deleted_at.is_(None))
    return {job.id: job for job in (await session.execute(query)).scalars()}
