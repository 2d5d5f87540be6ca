"""The API's lists, a page at a time: jobs (filtered), a job's events, stored files."""

from __future__ import annotations

from collections.abc import Collection
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
from api.services.jobs import owned_job
from storage import job_listing
from storage.job_states import JobState
from storage.object_store import BadContinuation, ObjectStore
from storage.users import user_by_name


@dataclass(frozen=True)
class JobSearch:
    """What a request for jobs asks for besides its page."""

    states: Collection[str] = ()
    name: str | None = None
    owner: str | None = None
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


def owner_name_to_list(user: Principal, owner: str | None) -> str | None:
    """Whose jobs `user` gets when asking for `owner`'s: their own by default; another
    user's only as an admin; None (no one's) otherwise."""
    if owner is None or owner == user.name:
        return user.name
    return owner if user.is_admin else None


async def _owner_id(session: AsyncSession, user: Principal, name: str | None) -> int | None:
    if name is None:
        return None
    if name == user.name:
        return user.id
    owner = await user_by_name(session, name)
    return owner.id if owner is not None else None


async def list_jobs(
    session: AsyncSession, user: Principal, search: JobSearch, page: PageRequest
) -> JobList:
    """A page of the jobs `search` describes, newest first."""
    after = job_position(page.cursor) if page.cursor is not None else None
    states = parse_states(search.states)
    owner_name = owner_name_to_list(user, search.owner)
    owner_id = await _owner_id(session, user, owner_name)
    if owner_name is None or owner_id is None:
        return JobList(jobs=[], next=None)
    wanted = job_listing.JobFilter(
        owner_id=owner_id,
        states=states,
        name_contains=search.name,
        created_before=search.created_before,
        created_after=search.created_after,
    )
    rows = await job_listing.jobs_after(session, wanted, after, page.limit + 1)
    jobs, more = split_page(rows, page.limit)
    return JobList(
        jobs=[JobPublic.of(job, owner_name) for job in jobs],
        next=job_cursor(jobs[-1].created_at, jobs[-1].id) if more else None,
    )


async def job_events(
    session: AsyncSession, user: Principal, job_id: str, page: PageRequest
) -> EventList:
    """A page of the job's events, oldest first."""
    after = event_position(page.cursor) if page.cursor is not None else None
    await owned_job(session, user, job_id)
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
