"""Resizing a running elastic job: checkpoint, stop, and start again at the new size.

    record          (in the scheduling pass that decided it, under its lock) RUNNING ->
                    RESCALING with the autoscaler's reason; the job's learner count and
                    placement (an `admitted` event) are the new ones at once, so the next
                    pass counts the room as taken or given back; its learner rows go STOPPING
    stop            SIGTERM to the learners: each runner checkpoints and uploads it
    finish          once they are gone: RESCALING -> DEPLOYING with a new attempt of the new
                    size (`NUM_LEARNERS`, `DLAAS_GLOBAL_BATCH_SIZE`, `DLAAS_BATCH_SIZE`); its
                    learners restore the newest checkpoint and train on from its step

A resize is not a restart: it uses none of the job's restarts. The time from the record to
the new attempt running is the resize's measured cost (`resized` event), which the
autoscaler weighs the next growth against. `finish` runs from the pass that recorded the
resize, and from the reconcile for a RESCALING job (a worker that died in between).
"""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncSession

from lifecycle_manager.glue.context import Context
from lifecycle_manager.glue.learner_stopping import mark_stopping
from lifecycle_manager.scheduler.elastic_pass import Resize
from storage import jobs as repo
from storage.job_states import Desired, JobState

RESIZING_EVENT = "resizing"
ADMITTED_EVENT = "admitted"


async def record(session: AsyncSession, resize: Resize) -> int | None:
    """Move a RUNNING job to RESCALING at its new size; the attempt to stop, or None when
    the job moved on meanwhile (and is left as it is)."""
    job = await repo.lock_job(session, resize.job_id)
    if job is None or job.desired != Desired.RUN or job.deleted_at is not None:
        return None
    if job.state != JobState.RUNNING or job.learners != resize.old.learners:
        return None
    detail = {
        "attempt": job.attempt,
        "from_learners": resize.old.learners,
        "to_learners": resize.new.learners,
        "from_global_batch": resize.old.global_batch,
        "to_global_batch": resize.new.global_batch,
        "measured_samples_s": round(resize.old.throughput, 3),
        "expected_samples_s": round(resize.new.throughput, 3),
    }
    moved = await repo.transition(
        session,
        job.id,
        JobState.RESCALING,
        resize.reason,
        detail,
        only_from=[JobState.RUNNING],
        learners=resize.new.learners,
    )
    if not moved.changed:
        return None
    await repo.add_event(session, job.id, RESIZING_EVENT, resize.reason, detail)
    await repo.add_event(
        session,
        job.id,
        ADMITTED_EVENT,
        f"placed {resize.new.learners} learners on {', '.join(sorted(set(resize.nodes)))} "
        "for the resize",
        {
            "attempt": job.attempt,
            "nodes": list(resize.nodes),
            "gpu_product": resize.gpu_product,
            "borrowed": False,
            "backfilled": False,
            "resize": True,
        },
    )
    await mark_stopping(session, job.id, f"stopping: resizing to {resize.new.learners} learners")
    return int(job.attempt)


async def stop(ctx: Context, job_id: str, attempt: int) -> None:
    """Ask the learners of the attempt being resized to checkpoint and stop."""
    await ctx.backend.delete_learners(job_id, up_to_attempt=attempt)


async def learners_gone(ctx: Context, job_id: str) -> bool | None:
    """For a RESCALING job: whether its old learners are gone (waiting up to the stop
    wait); None when the job is not RESCALING to run."""
    async with ctx.sessions() as session:
        job = await repo.get_job_any(session, job_id)
        if job is None or job.state != JobState.RESCALING or job.desired != Desired.RUN:
            return None
        attempt = job.attempt
    wait = ctx.timings.stop_wait_s
    return await ctx.backend.delete_learners(job_id, wait=wait, up_to_attempt=attempt)
