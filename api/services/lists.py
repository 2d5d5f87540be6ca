"""The API's lists, a page at a time: jobs (filtered), a job's events, stored files."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import datetime

from anyio import to_thread
from sqlalchemy.ext.asyncio import AsyncSession

from api.auth import Principal
from api.errors import Invalid
from api.pagination import (
    PageRequest,
    bad_cursor,
    event_cursor,
    event_position,
    job_cursor,
    job_position,
    listing_continuation,
    listing_cursor,
    split_page,
)
from api.schemas import EventList, EventPublic, FileInfo, FileList, JobList, JobPublic
from storage import job_listing
from storage.job_listing import JobFilter
from storage.job_states import JobState
from storage.models import Job
from storage.object_store import BadContinuation, ObjectStore
from storage.teams import team_by_name
from storage.users import user_by_name


@dataclass(frozen=True)
class JobSearch:
    """What a request for jobs asks for besides its page."""

    states: Collection[str] = ()
    name: str | None = None
    owner: str | None = None
    team: str | None = None
    created_before: datetime | None = None
    created_after: datetime | None = None


def parse_states(names: Collection[str]) -> frozenset[JobState]:
    known = {state.value: state for state in JobState}
    unknown = [name for name in names if name not in known]
    if unknown:
        raise Invalid(
            f"state {unknown[0]!r} is not a job state: use one or more of {', '.join(known)}",
            code="invalid_state",
            field="state",
        )
    return frozenset(known[name] for name in names)


def visible_team_ids(user: Principal) -> frozenset[int] | None:
    """The teams whose jobs the user sees: those they have a role in; None (every team's)
    for a platform admin."""
    return None if user.is_admin else frozenset(team.team_id for team in user.teams)


async def wanted_team_ids(
    session: AsyncSession, user: Principal, team_name: str | None
) -> frozenset[int] | None:
    """The teams whose jobs to show: those the user sees (None: every team's), or only the
    one named if they see it (none if they do not)."""
    team_ids = visible_team_ids(user)
    if team_name is None:
        return team_ids
    team = await team_by_name(session, team_name)
    if team is None or (team_ids is not None and team.id not in team_ids):
        return frozenset()
    return frozenset({team.id})


async def _filter(session: AsyncSession, user: Principal, search: JobSearch) -> JobFilter | None:
    """What to list of the jobs the user sees; None when the filters leave nothing."""
    team_ids = await wanted_team_ids(session, user, search.team)
    if search.team is not None and not team_ids:
        return None
    owner_id = None
    if search.owner is not None:
        owner = await user_by_name(session, search.owner)
        if owner is None:
            return None
        owner_id = owner.id
    return JobFilter(
        team_ids=team_ids,
        owner_id=owner_id,
        states=parse_states(search.states),
        name_contains=search.name,
        created_before=search.created_before,
        created_after=search.created_after,
    )


async def public_jobs(session: AsyncSession, jobs: Sequence[Job]) -> list[JobPublic]:
    """The jobs as the API shows them, with their owners' and teams' names."""
    owners, teams = await job_listing.owner_and_team_names(session, jobs)
    return [JobPublic.of(job, owners[job.owner_id], teams[job.team_id]) for job in jobs]


async def list_jobs(
    session: AsyncSession, user: Principal, search: JobSearch, page: PageRequest
) -> JobList:
    """A page of the jobs `search` describes among those the user sees, newest first."""
    after = job_position(page.cursor) if page.cursor is not None else None
    parse_states(search.states)
    wanted = await _filter(session, user, search)
    if wanted is None:
        return JobList(jobs=[], next=None)
    rows = await job_listing.jobs_after(session, wanted, after, page.limit + 1)
    jobs, more = split_page(rows, page.limit)
    return JobList(
        jobs=await public_jobs(session, jobs),
        next=job_cursor(jobs[-1].created_at, jobs[-1].id) if more else None,
    )


async def job_events(session: AsyncSession, job_id: str, page: PageRequest) -> EventList:
    """A page of the job's events, oldest first."""
    after = event_position(page.cursor) if page.cursor is not None else None
    rows = await job_listing.events_after(session, job_id, after, page.limit + 1)
    events, more = split_page(rows, page.limit)
    return EventList(
        events=[EventPublic.of(event) for event in events],
        next=event_cursor(events[-1].id) if more else None,
    )


async def file_list(objects: ObjectStore, prefix: str, page: PageRequest) -> FileList:
    """A page of the files under `prefix`, paged by the object store's own continuation."""
    continuation = listing_continuation(page.cursor) if page.cursor is not None else None
    try:
        listed = await to_thread.run_sync(objects.list_page, prefix, page.limit, continuation)
    except BadContinuation:
        raise bad_cursor() from None
    return FileList(
        files=[FileInfo(path=info.key[len(prefix) :], size=info.size) for info in listed.objects],
        next=listing_cursor(listed.continuation) if listed.continuation is not None else None,
    )
