"""A gang the cluster cannot hold yet waits QUEUED, keeping the attempt it was given.

`deploy_job` moves a job to DEPLOYING with a new attempt (learner rows PENDING for it) and
asks the backend for the whole gang. When gang admission refuses (`NoCapacity`: nothing of
the gang was created), the job goes back DEPLOYING -> QUEUED with the reason, recorded as
a state event, and is deployed again later: by the task's retry and by the reconcile's
sweep of QUEUED jobs. No learner of the refused attempt ever ran, so that next deploy
reuses the attempt instead of counting a new one: a job that waited an hour for GPUs still
starts as attempt 1, and its learner rows, pod names and events agree on it.
"""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncSession

from lifecycle_manager.backends.base import NoCapacity
from storage import jobs as repo
from storage.job_states import JobState
from storage.models import Job

CAPACITY_RETRY_S = 5.0  # the task's first retry; it backs off from there
_WAITING = "waiting_for_capacity"


async def requeue_for_capacity(
    session: AsyncSession, job_id: str, attempt: int, refusal: NoCapacity
) -> bool:
    """DEPLOYING -> QUEUED if the job is still deploying `attempt`; whether it moved."""
    job = await repo.lock_job(session, job_id)
    if job is None or job.attempt != attempt:
        return False
    moved = await repo.transition(
        session,
        job_id,
        JobState.QUEUED,
        f"waiting for capacity: {refusal}",
        {"attempt": attempt, _WAITING: True},
        only_from=[JobState.DEPLOYING],
    )
    return moved.changed


async def waiting_for_capacity(session: AsyncSession, job: Job) -> bool:
    """Whether a QUEUED job got there by `requeue_for_capacity` of its current attempt."""
    if job.state != JobState.QUEUED:
        return False
    last = await repo.latest_event(session, job.id, "state")
    return (
        last is not None
        and last.to_state == JobState.QUEUED
        and bool(last.detail.get(_WAITING))
        and last.detail.get("attempt") == job.attempt
    )
