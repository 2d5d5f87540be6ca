"""Job operations behind the routes: submit, read, halt, resume, delete."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import BinaryIO

from anyio import to_thread
from sqlalchemy.ext.asyncio import AsyncSession

from api.archive import check_model_archive
from api.auth import Principal
from api.errors import Conflict, NotFound
from api.manifest import parse_manifest
from api.state import ApiState
from storage import jobs as repo
from storage.job_states import FINAL_STATES, JobState
from storage.models import Job, JobEvent, utcnow
from storage.object_store import ObjectStore

log = logging.getLogger(__name__)


def model_key(job_id: str) -> str:
    return f"jobs/{job_id}/model.zip"


def _store_archive(objects: ObjectStore, job_id: str, archive: BinaryIO) -> None:
    archive.seek(0)
    objects.put_stream(model_key(job_id), archive)


def _check_archive(archive: BinaryIO, state: ApiState) -> None:
    archive.seek(0)
    check_model_archive(archive, state.archive_limits)


async def submit_job(
    state: ApiState, user: Principal, manifest_text: bytes, archive: BinaryIO, archive_size: int
) -> Job:
    """Validate, store the archive, then record the job: a job row never points at nothing."""
    manifest = parse_manifest(manifest_text)
    # Small archives are checked and stored inline: a thread hop costs more than the work.
    if archive_size <= 256 * 1024:
        _check_archive(archive, state)
    else:
        await to_thread.run_sync(_check_archive, archive, state)
    job_id = repo.new_job_id()
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
                name=manifest.name,
                learners=manifest.learners,
                manifest=manifest.normalized(),
            )
    except BaseException:
        await to_thread.run_sync(state.objects.delete_prefix, f"jobs/{job_id}/")
        raise
    state.nudger.deploy(job.id)
    return job


async def owned_job(session: AsyncSession, user: Principal, job_id: str) -> Job:
    job = await repo.get_job(session, job_id, owner_id=user.id)
    if job is None:
        raise NotFound(
            f"no job {job_id!r} among your jobs; `dlaas list` shows them", field="job_id"
        )
    return job


async def list_jobs(session: AsyncSession, user: Principal) -> Sequence[Job]:
    return await repo.list_jobs(session, owner_id=user.id)


async def job_events(session: AsyncSession, user: Principal, job_id: str) -> Sequence[JobEvent]:
    await owned_job(session, user, job_id)
    return await repo.list_events(session, job_id)


async def halt_job(state: ApiState, session: AsyncSession, user: Principal, job_id: str) -> Job:
    job = await owned_job(session, user, job_id)
    if JobState(job.state) in FINAL_STATES:
        raise Conflict(f"job {job_id} is {job.state}; only a job that is not finished can halt")
    if job.state != JobState.HALTED:
        await repo.update_job(session, job_id, desired="halt")
        await repo.add_event(session, job_id, "halt_requested", f"halt requested by {user.name}")
        await session.commit()
        state.nudger.halt(job_id)
    return job


async def resume_job(state: ApiState, session: AsyncSession, user: Principal, job_id: str) -> Job:
    job = await owned_job(session, user, job_id)
    if job.state != JobState.HALTED and job.desired != "halt":
        raise Conflict(
            f"job {job_id} is {job.state}, not HALTED; `dlaas halt {job_id}` first",
            code="not_halted",
        )
    await repo.update_job(session, job_id, desired="run")
    await repo.add_event(session, job_id, "resume_requested", f"resume requested by {user.name}")
    await session.commit()
    state.nudger.resume(job_id)
    return job


async def delete_job(state: ApiState, session: AsyncSession, user: Principal, job_id: str) -> None:
    await owned_job(session, user, job_id)
    await repo.update_job(session, job_id, desired="delete", deleted_at=utcnow())
    await repo.add_event(session, job_id, "delete_requested", f"deleted by {user.name}")
    await session.commit()
    state.nudger.delete(job_id)
