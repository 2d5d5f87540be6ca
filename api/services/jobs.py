"""Job operations behind the routes: submit, read, halt, resume, delete."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, BinaryIO

from anyio import to_thread
from redis.exceptions import RedisError
from sqlalchemy.ext.asyncio import AsyncSession

from api.archive import check_model_archive
from api.auth import Principal
from api.errors import Conflict, Invalid, NotFound
from api.manifest import parse_manifest
from api.services import node_fit, quota, shared_nodes, team_fit
from api.services.priority import check_priority
from api.services.team_choice import choose_team
from api.state import ApiState
from storage import jobs as repo
from storage import pending_archives
from storage.job_states import FINAL_STATES, Desired, JobState
from storage.models import Job
from storage.object_store import ObjectStore
from storage.training_data import data_prefix, training_data_store

log = logging.getLogger(__name__)


def model_key(job_id: str) -> str:
    return f"jobs/{job_id}/model.zip"


def _store_archive(objects: ObjectStore, job_id: str, archive: BinaryIO) -> None:
    archive.seek(0)
    objects.put_stream(model_key(job_id), archive)


def _check_archive(archive: BinaryIO, state: ApiState, field: str) -> None:
    archive.seek(0)
    check_model_archive(archive, state.archive_limits, field)


# Called with the new job and its team's name
JobCreated = Callable[[AsyncSession, Job, str], Awaitable[None]]


@dataclass(frozen=True)
class Submission:
    manifest_text: bytes
    archive: BinaryIO
    archive_size: int
    team: str | None = None  # the team it names, if any (`api.services.team_choice`)
    archive_field: str = "model"  # the form field the archive came in, as refusals name it


async def submit_job(
    state: ApiState,
    user: Principal,
    submission: Submission,
    on_created: JobCreated | None = None,
) -> tuple[Job, str]:
    """Validate, store the archive, then record the job: a job row never points at nothing.
    `on_created` runs in the job row's transaction (to store the answer a retry gets).
    Returns the job and its team's name."""
    async with state.sessions() as session:
        team = await choose_team(session, user, submission.team)
    await shared_nodes.check_isolated(state, user)
    await quota.check_room(state, user, 0, "a new job")
    manifest_text, archive, archive_size = (
        submission.manifest_text,
        submission.archive,
        submission.archive_size,
    )
    # Bounded (tens of ms at worst), but off the event loop all the same.
    manifest = await to_thread.run_sync(parse_manifest, manifest_text)
    await check_priority(state, user, team, manifest.priority)
    await node_fit.check_fits(state, manifest)
    await team_fit.check_team_fits(state, team.id, manifest)
    normalized = manifest.normalized()
    await _check_training_data(state.objects, user.id, normalized)
    # Small archives are checked and stored inline: a thread hop costs more than the work.
    if archive_size <= 256 * 1024:
        _check_archive(archive, state, submission.archive_field)
    else:
        await to_thread.run_sync(_check_archive, archive, state, submission.archive_field)
    job_id = repo.new_job_id()
    await pending_archives.note(state.redis, job_id)
    if archive_size <= 256 * 1024:
        _store_archive(state.objects, job_id, archive)
    else:
        await to_thread.run_sync(_store_archive, state.objects, job_id, archive)
    try:
        async with state.sessions() as session, session.begin():
            job = await repo.create_job(
                session,
                job_id=job_id,
                owner_id=user.id,
                team_id=team.id,
                name=manifest.name,
                learners=manifest.learners,
                manifest=normalized,
            )
            if on_created is not None:
                await on_created(session, job, team.name)
    except BaseException:
        await to_thread.run_sync(state.objects.delete_prefix, f"jobs/{job_id}/")
        raise
    try:
        await pending_archives.forget(state.redis, job_id)
    except RedisError as error:  # the job exists: the collector drops the note on its own
        log.warning("job %s: could not drop its pending-archive note: %s", job_id, error)
    state.nudger.deploy(job.id)
    return job, team.name


def _holds_objects(objects: ObjectStore, prefix: str) -> bool:
    return next(iter(objects.list(prefix)), None) is not None


async def _check_training_data(
    objects: ObjectStore, owner_id: int, manifest: Mapping[str, Any]
) -> None:
    """Refuse a job whose training data is missing now rather than after every learner of
    every restart failed on it."""
    store = training_data_store(manifest)
    if store is None:
        return
    index, container = store
    if await to_thread.run_sync(_holds_objects, objects, data_prefix(owner_id, container)):
        return
    raise Invalid(
        f"data container {container!r} does not exist or is empty: upload the training data "
        f"first with `dlaas data upload {container} PATH` (`dlaas data list {container}` "
        "shows what it holds)",
        code="no_training_data",
        field=f"data_stores[{index}].training_data.container",
    )


async def _locked_job(session: AsyncSession, job_id: str) -> Job:
    """The job's row, locked: what is checked of it holds until the commit. The caller's
    right to act on it was checked by the route (`api.access.JobAccess`)."""
    job = await repo.lock_job(session, job_id)
    if job is None or job.deleted_at is not None:
        raise NotFound(f"job {job_id!r} was just deleted", code="deleted", field="job_id")
    return job


async def halt_job(state: ApiState, session: AsyncSession, user: Principal, job_id: str) -> Job:
    job = await _locked_job(session, job_id)
    if JobState(job.state) in FINAL_STATES:
        raise Conflict(
            f"job {job_id} is {job.state}: it has ended, there is nothing to halt; "
            + _after_the_end(job_id, JobState(job.state))
        )
    if job.desired != Desired.HALT:
        await repo.update_job(session, job_id, desired=Desired.HALT.value)
        await repo.add_event(session, job_id, "halt_requested", f"halt requested by {user.name}")
        await session.commit()
        if job.state != JobState.HALTED:
            state.nudger.halt(job_id)
    return job


async def resume_job(state: ApiState, session: AsyncSession, user: Principal, job_id: str) -> Job:
    job = await _locked_job(session, job_id)
    if JobState(job.state) in FINAL_STATES:
        raise Conflict(
            f"job {job_id} is {job.state}: it has ended, there is nothing to resume; "
            + _after_the_end(job_id, JobState(job.state)),
            code="not_halted",
        )
    if job.state != JobState.HALTED and job.desired != Desired.HALT:
        raise Conflict(
            f"job {job_id} is {job.state}, not HALTED; `dlaas halt {job_id}` first",
            code="not_halted",
        )
    await repo.update_job(session, job_id, desired=Desired.RUN.value)
    await repo.add_event(session, job_id, "resume_requested", f"resume requested by {user.name}")
    if job.state == JobState.HALTED:
        # Queued at once, not when a worker takes the request: `dlaas wait` right after a
        # resume would otherwise find the job still HALTED, a final state, and return; and a
        # request the workers never hear of (Redis down) is still taken by the scheduler.
        await repo.transition(
            session, job_id, JobState.QUEUED, "resumed by user", only_from=[JobState.HALTED]
        )
    await session.commit()
    state.nudger.resume(job_id)
    await session.refresh(job)
    return job


def _after_the_end(job_id: str, state: JobState) -> str:
    """What a user can still do with a job that has ended in `state`."""
    if state == JobState.COMPLETED:
        return f"`dlaas download {job_id}` fetches its results"
    if state == JobState.FAILED:
        return (
            f"`dlaas logs {job_id}` shows why it failed; "
            "submit it again with `dlaas train` to run it anew"
        )
    return "submit it again with `dlaas train` to run it anew"


async def delete_job(state: ApiState, session: AsyncSession, user: Principal, job_id: str) -> None:
    """The job is DELETED at once; the lifecycle manager stops its learners and removes
    what it stored."""
    await _locked_job(session, job_id)
    await repo.mark_deleted(session, job_id, f"deleted by {user.name}")
    await session.commit()
    state.nudger.delete(job_id)
