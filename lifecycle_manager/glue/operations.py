"""What the lifecycle manager does to one job: deploy, halt, resume, delete.

Each operation is keyed by the job id and idempotent: it reads what the job row says
(`state`, and `desired`, which the API sets before it nudges) and drives the cluster towards
it, so running it twice, or again after a crash, ends the same way. An operation returns an
`Outcome`; one with `retry_after` wants to be run again (the Celery task retries it with
backoff, and the periodic reconcile catches whatever a lost retry misses).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Sequence
from dataclasses import dataclass

from redis.exceptions import RedisError
from sqlalchemy import ColumnElement, Exists, exists, select
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import InstrumentedAttribute

from lifecycle_manager.backends.base import BackendUnavailable, LearnerSpec, NoCapacity
from lifecycle_manager.decisions.job_progress import HALTED_BY_USER
from lifecycle_manager.decisions.restart_policy import RestartScope
from lifecycle_manager.glue import autoscaling, job_users, resizing
from lifecycle_manager.glue import preemption as preemption_steps
from lifecycle_manager.glue.capacity_wait import (
    CAPACITY_RETRY_S,
    requeue_for_capacity,
    waiting_for_capacity,
)
from lifecycle_manager.glue.context import Context
from lifecycle_manager.glue.learner_reports import settle_job
from lifecycle_manager.glue.learner_restarts import (
    deploy_reason,
    learners_to_create,
    restart_scope,
    restarting_learners,
)
from lifecycle_manager.glue.learner_specs import learner_specs
from lifecycle_manager.glue.learner_stopping import mark_stopped, mark_stopping
from lifecycle_manager.glue.scheduling import admitted, placement_for
from lifecycle_manager.glue.scheduling_pass import run_pass
from lifecycle_manager.scheduler import SchedulePass
from storage import job_credentials, streams
from storage import jobs as repo
from storage.job_states import (
    ACTIVE_STATES,
    FINAL_STATES,
    LEARNER_FINISHED,
    Desired,
    JobState,
    LearnerState,
)
from storage.models import Job, JobEvent

log = logging.getLogger(__name__)

PURGED_EVENT = "purged"


@dataclass(frozen=True)
class Outcome:
    message: str
    retry_after: float | None = None


async def deploy_job(ctx: Context, job_id: str) -> Outcome:
    """QUEUED -> DEPLOYING with a new attempt, then create every learner of it (a gang).

    Run again on a DEPLOYING job, it creates whatever learner of the attempt is missing.
    A gang the cluster cannot hold yet goes back to QUEUED and keeps its attempt
    (`capacity_wait`); while the cluster still lacks room it stays there quietly.
    """
    if await _awaiting_admission(ctx, job_id):
        return await schedule_jobs(ctx, job_id)
    async with ctx.sessions.begin() as session:
        job = await repo.lock_job(session, job_id)
        if job is None:
            return Outcome("no such job")
        if job.deleted_at is not None or job.desired != Desired.RUN:
            return Outcome(f"not deploying: the job is to {job.desired}")
        attempt = job.attempt
        kept_learners = restart_scope(job) is RestartScope.LEARNER
        if job.state in (JobState.QUEUED, JobState.RECOVERING, JobState.RESCALING):
            if not await waiting_for_capacity(session, job):
                attempt += 1
            recreate = await learners_to_create(session, job, attempt)
            reason = deploy_reason(attempt, recreate, job.learners)
            if job.state == JobState.RESCALING:
                reason = f"resized to {job.learners} learners: {reason}"
            moved = await repo.transition(
                session,
                job_id,
                JobState.DEPLOYING,
                reason,
                {"attempt": attempt},
                only_from=[JobState(job.state)],
                attempt=attempt,
            )
            if not moved.changed:
                return Outcome(f"not deploying: the job is {moved.previous}")
            await repo.reset_learners(session, job_id, job.learners, attempt, only=recreate)
        elif job.state != JobState.DEPLOYING:
            return Outcome(f"nothing to deploy: the job is {job.state}")
        # The learners' credential, minted with the transition it serves: its hash is stored
        # (and so valid) only if the deploy is.
        token = await job_credentials.mint(session, job_id)
        specs = await _specs_of_attempt(ctx, session, job, attempt, token)
    try:
        # A halted job's streams may have been set to expire: they live while it runs.
        await streams.akeep_job_streams(ctx.redis, job_id)
        await job_users.grant(ctx, job_id, token)
    except RedisError as error:
        # The monitor grants the job's Redis user within a second; learners retry meanwhile.
        log.warning("job %s: could not prepare its Redis keys and user: %s", job_id, error)
    try:
        created = await ctx.backend.create_learners(specs)
    except NoCapacity as refusal:
        async with ctx.sessions.begin() as session:
            await requeue_for_capacity(session, job_id, attempt, refusal)
        return Outcome(f"waiting for capacity: {refusal}", retry_after=CAPACITY_RETRY_S)
    except BackendUnavailable as error:
        async with ctx.sessions.begin() as session:
            job = await repo.lock_job(session, job_id)
            if job is not None and job.state == JobState.DEPLOYING and job.attempt == attempt:
                await repo.update_job(session, job_id, reason=f"waiting for the cluster: {error}")
        return Outcome(f"the cluster is unavailable: {error}", retry_after=1.0)
    async with ctx.sessions.begin() as session:
        job = await repo.lock_job(session, job_id)
        finished = job is None or job.state in FINAL_STATES
        wanted = (
            job is not None
            and not finished
            and job.desired == Desired.RUN
            and job.attempt == attempt
        )
        if created:
            noun = "learner" if len(created) == 1 else "learners"
            await repo.add_event(
                session,
                job_id,
                "learners_created",
                f"created {len(created)} {noun}: {', '.join(created)}",
                {"attempt": attempt, "names": created},
            )
    if not wanted:
        # Halted, deleted or finished while the learners were being created: take them back,
        # and the objects made for them (its Secret, its Service) if the job runs no more.
        for spec in specs:
            await ctx.backend.delete_learner(spec.name)
        if finished:
            await ctx.backend.delete_learners(job_id)
        return Outcome("the job changed while deploying; its learners were stopped")
    if kept_learners:
        # A learner left running may have ended while the job was RECOVERING or QUEUED,
        # when ends are recorded but not acted on: act on it now.
        await settle_job(ctx, job_id)
    return Outcome(f"attempt {attempt}: {len(created)} of {len(specs)} learners created")


async def _specs_of_attempt(
    ctx: Context, session: AsyncSession, job: Job, attempt: int, job_token: str = ""
) -> list[LearnerSpec]:
    """The learners of `attempt`: all of a gang, or those a learner restart re-creates,
    each on the node the job's admission placed it on."""
    of_attempt = {r.index for r in await repo.learners_of(session, job.id) if r.attempt == attempt}
    placement = await placement_for(session, job.id)
    nodes = placement.nodes if placement is not None else ()
    return [
        dataclasses.replace(
            spec, node=nodes[spec.learner - 1] if spec.learner <= len(nodes) else None
        )
        for spec in learner_specs(
            job_id=job.id,
            owner_id=job.owner_id,
            attempt=attempt,
            num_learners=job.learners,
            manifest=job.manifest,
            settings=ctx.settings,
            job_token=job_token,
        )
        if spec.learner in of_attempt
    ]


async def _awaiting_admission(ctx: Context, job_id: str) -> bool:
    """Whether a job is QUEUED to run and the scheduler has not admitted it yet."""
    async with ctx.sessions() as session:
        job = await repo.get_job_any(session, job_id)
        if job is None or job.state != JobState.QUEUED or job.desired != Desired.RUN:
            return False
        return not await admitted(session, job)


async def schedule_pass(ctx: Context) -> tuple[SchedulePass | None, dict[str, Outcome]]:
    """Run a scheduling pass and act on it: ask the victims of a preemption to checkpoint
    and stop, deploy the admitted jobs. Returns the pass (None when none ran: the cluster
    could not say what it has, or another pass held the scheduler) and each admitted job's
    deploy outcome."""
    recorded = await run_pass(ctx)
    if recorded is None:
        return None, {}
    decided = recorded.decided
    for victim_id, attempt in recorded.stopping.items():
        await preemption_steps.ask_to_stop(ctx, victim_id, attempt)
    admitted_ids = [admission.job_id for admission in decided.admissions]
    deployed = await asyncio.gather(*(deploy_job(ctx, job_id) for job_id in admitted_ids))
    try:
        resized = await autoscaling.autoscale_pass(ctx, decided.waiting)
    except BackendUnavailable as error:
        log.warning("autoscaling: the cluster is unavailable: %s", error)
        resized = []
    for job_id, attempt in resized:
        await resizing.stop(ctx, job_id, attempt)
    await asyncio.gather(*(finish_resize(ctx, job_id) for job_id, _ in resized))
    return decided, dict(zip(admitted_ids, deployed, strict=True))


async def finish_resize(ctx: Context, job_id: str) -> Outcome:
    """RESCALING -> the next attempt at the new size, once the old learners are gone
    (each checkpointed as it stopped); `resizing` says how a resize goes."""
    gone = await resizing.learners_gone(ctx, job_id)
    if gone is None:
        return Outcome("nothing to resize")
    if not gone:
        return Outcome("waiting for the learners to checkpoint and stop", retry_after=0.5)
    async with ctx.sessions.begin() as session:
        await mark_stopped(session, job_id, "resized")
    return await deploy_job(ctx, job_id)


async def schedule_jobs(ctx: Context, job_id: str | None = None) -> Outcome:
    """A scheduling pass, acted on; with `job_id`, the outcome says what became of it."""
    decided, deployed = await schedule_pass(ctx)
    if decided is None:
        return Outcome(
            "no scheduling pass ran (the cluster could not say what it has, or another pass"
            " held the scheduler): trying again",
            retry_after=1.0,
        )
    if job_id in deployed:
        return deployed[job_id]
    for waiting in decided.waiting:
        if waiting.job_id == job_id:
            return Outcome(f"queued, position {waiting.position}: {waiting.reason}")
    for refusal in decided.refusals:
        if refusal.job_id == job_id:
            return Outcome(f"queued, too big for the cluster as it is now: {refusal.reason}")
    return Outcome(f"scheduled: {len(deployed)} admitted")


async def recover_job(ctx: Context, job_id: str) -> Outcome:
    """RECOVERING -> the next attempt, once the restart's backoff passed and the failed
    attempt's learners are gone; its runners restore the newest committed checkpoint.

    A restart of one learner (`restart_policy.scope: learner`) stops and re-creates only that
    learner; the others keep running."""
    async with ctx.sessions() as session:
        job = await repo.get_job_any(session, job_id)
        if job is None or job.deleted_at is not None:
            return Outcome("no such job")
        if job.state != JobState.RECOVERING or job.desired != Desired.RUN:
            return Outcome(f"nothing to recover: the job is {job.state}")
        restart = await repo.latest_event(session, job_id, "restart")
        scope = restart_scope(job)
        restarting = await restarting_learners(session, job)
        failed_attempt = job.attempt
    if restart is not None:
        wait = float(restart.detail.get("delay_s", 0.0)) - ctx.age(restart.time)
        if wait > 0:
            return Outcome(f"backing off for {wait:.1f} s", retry_after=wait)
    # Only the failed attempt's: a recovery that raced this one may have deployed the next.
    wait, grace = ctx.timings.stop_wait_s, ctx.timings.restart_grace_s
    if scope is RestartScope.GANG:
        gone = await ctx.backend.delete_learners(
            job_id, wait=wait, grace=grace, up_to_attempt=failed_attempt
        )
    else:
        stopped = [
            await ctx.backend.delete_learner_of(
                job_id, i, wait=wait, grace=grace, up_to_attempt=failed_attempt
            )
            for i in restarting
        ]
        gone = all(stopped)
    if not gone:
        return Outcome("waiting for the failed attempt's learners to stop", retry_after=0.5)
    return await deploy_job(ctx, job_id)


async def _finish_halt(
    session: AsyncSession, job_id: str, reason: str, attempt: int, desired: Desired
) -> None:
    """Every learner of `attempt` is gone: rows still STOPPING (or PENDING: never started,
    the job waited for room) are STOPPED, the job HALTED; unless the job moved on
    meanwhile (to another attempt, or another wish than `desired`)."""
    job = await repo.lock_job(session, job_id)
    if job is None or job.state not in (JobState.QUEUED, *ACTIVE_STATES):
        return  # already HALTED (the monitor saw the last exit), or finished meanwhile
    if job.attempt != attempt or job.desired != desired:
        return  # resumed (and deployed again) while the halt went on: that is its business
    await mark_stopped(session, job_id, "halted")
    await repo.transition(session, job_id, JobState.HALTED, reason)


async def halt_job(ctx: Context, job_id: str) -> Outcome:
    """Stop a job's learners (each runner uploads its committed checkpoint), then HALTED."""
    async with ctx.sessions.begin() as session:
        job = await repo.lock_job(session, job_id)
        if job is None:
            return Outcome("no such job")
        if job.desired != Desired.HALT or job.state in FINAL_STATES:
            return Outcome(f"nothing to halt: the job is {job.state} and to {job.desired}")
        if job.state == JobState.HALTED:
            return Outcome("already halted")
        rows = await repo.learners_of(session, job_id)
        started = [r for r in rows if r.state not in (LearnerState.PENDING, *LEARNER_FINISHED)]
        attempt = job.attempt
        if job.state == JobState.QUEUED and not started:  # a learner restart may keep some
            await _finish_halt(session, job_id, HALTED_BY_USER, attempt, Desired.HALT)
            return Outcome("halted before it was deployed")
        await mark_stopping(session, job_id, "stopping: halt requested")
    wait = ctx.timings.stop_wait_s
    if not await ctx.backend.delete_learners(job_id, wait=wait, up_to_attempt=attempt):
        return Outcome("learners are stopping", retry_after=0.5)
    async with ctx.sessions.begin() as session:
        await _finish_halt(session, job_id, HALTED_BY_USER, attempt, Desired.HALT)
    await ctx.request_pass()
    return Outcome("halted")


async def resume_job(ctx: Context, job_id: str) -> Outcome:
    """HALTED -> QUEUED, then deploy a new attempt (its runners restore the newest checkpoint).

    A resume that overtakes its halt (learners still STOPPING) finishes the halt first.
    """
    async with ctx.sessions.begin() as session:
        job = await repo.lock_job(session, job_id)
        if job is None or job.deleted_at is not None or job.desired != Desired.RUN:
            return Outcome("nothing to resume")
        rows = await repo.learners_of(session, job_id)
        halting = job.state in ACTIVE_STATES and any(
            row.state in (LearnerState.STOPPING, LearnerState.STOPPED) for row in rows
        )
        preempted = halting and await preemption_steps.preemption_under_way(session, job)
        attempt = job.attempt
    if preempted:  # not a halt: the scheduler stops it to make room for another job
        if not await preemption_steps.requeue(ctx, job_id):
            return Outcome("waiting for the preempted learners to stop", retry_after=0.5)
        return await deploy_job(ctx, job_id)
    if halting:
        wait = ctx.timings.stop_wait_s
        if not await ctx.backend.delete_learners(job_id, wait=wait, up_to_attempt=attempt):
            return Outcome("waiting for the halted learners to stop", retry_after=0.5)
        async with ctx.sessions.begin() as session:
            await _finish_halt(session, job_id, "halted; resuming", attempt, Desired.RUN)
    async with ctx.sessions.begin() as session:
        job = await repo.lock_job(session, job_id)
        if job is not None and job.state == JobState.HALTED:
            await repo.transition(
                session, job_id, JobState.QUEUED, "resumed by user", only_from=[JobState.HALTED]
            )
    return await deploy_job(ctx, job_id)


async def delete_job(ctx: Context, job_id: str) -> Outcome:
    """DELETED (the API moved it there already, unless it was deleted otherwise), then stop
    the learners and delete the job's objects and Redis keys; the row and its events stay."""
    async with ctx.sessions.begin() as session:
        job = await repo.lock_job(session, job_id)
        if job is None:
            return Outcome("no such job")
        await repo.mark_deleted(session, job_id, "deleted")
        if await _purged(session, job_id):
            return Outcome("already deleted")
    # The learners go first: a runner still running would upload into the deleted prefix.
    if not await ctx.backend.delete_learners(job_id, wait=ctx.timings.stop_wait_s):
        return Outcome("learners are stopping", retry_after=0.5)
    await ctx.request_pass()
    removed = await asyncio.to_thread(ctx.objects.delete_prefix, f"jobs/{job_id}/")
    keys = await streams.adelete_job_streams(ctx.redis, job_id)
    async with ctx.sessions.begin() as session:
        if await repo.lock_job(session, job_id) is None or await _purged(session, job_id):
            return Outcome("already deleted")
        await repo.add_event(
            session,
            job_id,
            PURGED_EVENT,
            f"learners stopped; {removed} objects and {keys} live streams deleted",
            {"objects": removed, "redis_keys": keys},
        )
    return Outcome("deleted")


def _purge_recorded(job_id: ColumnElement[str] | InstrumentedAttribute[str] | str) -> Exists:
    return exists().where(JobEvent.job_id == job_id, JobEvent.kind == PURGED_EVENT)


async def _purged(session: AsyncSession, job_id: str) -> bool:
    return bool((await session.execute(select(_purge_recorded(job_id)))).scalar())


async def deleted_unpurged(session: AsyncSession) -> Sequence[Job]:
    """Deleted jobs whose cleanup has not finished (the reconcile finishes it)."""
    query = select(Job).where(Job.deleted_at.is_not(None), ~_purge_recorded(Job.id))
    return (await session.execute(query)).scalars().all()
