"""Preemption: a running job makes room for another the scheduler chose over it.

    record_stop     in the scheduling pass that chose it (so under its fence: a stale pass
                    asks nothing): a `preempting` event names the job it makes room for;
                    its learner rows go STOPPING
    ask_to_stop     once the pass committed, its learners get SIGTERM: each runner
                    checkpoints (the SDK saves at its next step) and uploads it within the
                    grace period
    requeue         once they are gone: learner rows STOPPED, the job back to QUEUED with a
                    `preempted` event; admitted again, it resumes from that checkpoint in a
                    new attempt, and none of its restarts is used

`requeue` runs from the pass that preempted, and from the reconcile for a job whose
learners are stopping while it is to run (a halt taken back, or this).
"""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncSession

from lifecycle_manager.glue.context import Context
from lifecycle_manager.glue.learner_stopping import mark_stopped, mark_stopping
from lifecycle_manager.glue.scheduling import ADMITTED_EVENT, CHECKPOINT_EVENT, PREEMPTING_EVENT
from storage import jobs as repo
from storage.job_states import ACTIVE_STATES, Desired, JobState
from storage.models import Job, JobEvent

PREEMPTED_EVENT = "preempted"


async def preemption_under_way(session: AsyncSession, job: Job) -> JobEvent | None:
    """The `preempting` event of a job asked to stop for another and not requeued yet."""
    if job.state not in ACTIVE_STATES:
        return None
    events = await repo.latest_events(session, [job.id], (PREEMPTING_EVENT, ADMITTED_EVENT))
    asked = events.get((job.id, PREEMPTING_EVENT))
    admitted = events.get((job.id, ADMITTED_EVENT))
    if asked is None or (admitted is not None and admitted.id > asked.id):
        return None
    return asked


async def record_stop(
    session: AsyncSession, victim_id: str, for_job_id: str, reason: str
) -> int | None:
    """In the transaction of the pass that chose it: ask a running job to checkpoint and
    stop. The attempt whose learners are to stop, or None if it was not asked now (asked
    before, or no longer running to run)."""
    job = await repo.lock_job(session, victim_id)
    if job is None or job.state not in ACTIVE_STATES or job.desired != Desired.RUN:
        return None
    if await preemption_under_way(session, job) is not None:
        return None
    await repo.add_event(
        session,
        victim_id,
        PREEMPTING_EVENT,
        reason,
        {"for_job": for_job_id, "attempt": job.attempt},
    )
    await mark_stopping(session, victim_id, f"stopping: preempted for job {for_job_id}")
    await repo.update_job(session, victim_id, reason=f"checkpointing to make room: {reason}")
    return job.attempt


async def ask_to_stop(ctx: Context, victim_id: str, attempt: int) -> None:
    """SIGTERM to the learners of a job `record_stop` asked to stop, once that committed."""
    await ctx.backend.delete_learners(victim_id, up_to_attempt=attempt)


async def requeue(ctx: Context, job_id: str) -> bool:
    """QUEUED once a preempted job's learners are gone; whether nothing is left to do."""
    async with ctx.sessions() as session:
        job = await repo.get_job_any(session, job_id)
        if job is None or await preemption_under_way(session, job) is None:
            return True
        attempt = job.attempt
    wait = ctx.timings.stop_wait_s
    if not await ctx.backend.delete_learners(job_id, wait=wait, up_to_attempt=attempt):
        return False
    async with ctx.sessions.begin() as session:
        job = await repo.lock_job(session, job_id)
        asked = None if job is None else await preemption_under_way(session, job)
        if job is None or asked is None or job.attempt != attempt:
            return True
        checkpoint = await repo.latest_event(session, job_id, CHECKPOINT_EVENT)
        resumes = (
            "resumes from its newest checkpoint"
            if checkpoint is not None
            else "starts over unless it checkpoints as it stops"
        )
        await mark_stopped(session, job_id, "preempted")
        why = f"preempted: {asked.reason}; {resumes} when admitted again"
        detail = {"attempt": attempt, **asked.detail}
        await repo.transition(session, job_id, JobState.QUEUED, why, detail)
        await repo.add_event(session, job_id, PREEMPTED_EVENT, why, detail)
    return True
