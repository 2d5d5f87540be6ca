"""The periodic sweep: make the cluster match the database, whatever messages were lost.

Level-triggered, like a Kubernetes controller: each pass recomputes the next step of every
open job from its whole stored state and what the cluster shows, so a step lost with a
message or a crashed process, or refused because the job moved meanwhile, is taken on the
next pass.

- learners of jobs that are gone, deleted, finished or halted, and learners of older
  attempts than their rows hold, are deleted (a row holds the attempt its learner was last
  created in: the job's attempt, or an older one for a learner that a restart of another
  learner, `restart_policy.scope: learner`, left running);
- every running job's learner rows are brought in line with the cluster (missed exits are
  applied, lost learners fail the job: "learners vanished") and the job is settled on them:
  a job whose learners have all ended reaches its final state here whatever happened to
  the events before;
- queued jobs are weighed by one scheduling pass (`operations.schedule_jobs`), which also
  starts what a finished job made room for; a job admitted whose deploy was lost (a worker
  died between the admission and the deploy) and a DEPLOYING job whose learners did not
  appear are deployed again (creation is idempotent);
- halts, resumes and deletes that did not finish are finished, and a HALTED job the user
  resumed is resumed even if the resume's nudge was lost.

Safe to run twice, concurrently with the tasks and the monitor, or after a crash: every
step is one of the idempotent operations, taken under the job's row lock.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime

from lifecycle_manager.backends.base import BackendUnavailable, LearnerStatus
from lifecycle_manager.glue import autoscaling, operations, scheduling
from lifecycle_manager.glue.context import Context
from lifecycle_manager.glue.learner_reports import apply_cluster_view, settle_job
from storage import cluster_nodes
from storage import jobs as repo
from storage.job_states import ACTIVE_STATES, STOPPED_STATES, Desired, JobState, LearnerState
from storage.models import Job, utcnow

log = logging.getLogger(__name__)


@dataclass
class ReconcileReport:
    """What one sweep did; empty when everything already matched."""

    stopped: list[str] = field(default_factory=list)  # learner names, or job ids (all of one)
    deployed: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)  # jobs whose rows took cluster news
    finished: list[str] = field(default_factory=list)  # halts, resumes, deletes completed
    errors: list[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return any((self.stopped, self.deployed, self.updated, self.finished, self.errors))


@dataclass(frozen=True)
class _JobFacts:
    id: str
    state: JobState
    desired: Desired
    attempt: int
    deleted: bool
    age: float
    halting: bool  # learner rows of the current attempt say a halt is under way
    elastic: bool = False  # the autoscaler may resize it
    admitted_age: float | None = None  # a QUEUED job admitted this long ago, not yet deployed
    attempts: Mapping[int, int] = field(default_factory=dict)  # learner -> its row's attempt

    @property
    def wants_learners(self) -> bool:
        return not self.deleted and self.state not in STOPPED_STATES

    def wants(self, learner: LearnerStatus) -> bool:
        """Whether a live learner of this job is the one its row stands for."""
        return learner.attempt == self.attempts.get(learner.learner, self.attempt)


async def reconcile(ctx: Context) -> ReconcileReport:
    report = ReconcileReport()
    listed_at: datetime | None = utcnow()
    try:
        cluster: list[LearnerStatus] | None = await ctx.backend.list_learners()
    except BackendUnavailable as error:
        log.warning("reconcile: cluster unavailable: %s", error)
        report.errors.append(str(error))
        cluster = listed_at = None
    by_job: dict[str, list[LearnerStatus]] = defaultdict(list)
    for learner in cluster or []:
        by_job[learner.job_id].append(learner)
    open_jobs, known, unpurged = await _load(ctx, set(by_job))
    if cluster is not None:
        await _stop_unwanted(ctx, by_job, known, report)
    for facts in open_jobs:
        try:
            await _drive(ctx, facts, by_job.get(facts.id, []), listed_at, report)
        except Exception as error:  # one job's trouble must not stop the sweep
            log.exception("reconcile: job %s", facts.id)
            report.errors.append(f"{facts.id}: {error!r}")
    # a pass admits queued jobs, and the autoscaler after it sizes running elastic ones
    if any(
        facts.desired is Desired.RUN
        and (facts.state is JobState.QUEUED or (facts.elastic and facts.state is JobState.RUNNING))
        for facts in open_jobs
    ):
        try:
            _decided, deployed = await operations.schedule_pass(ctx)
            report.deployed.extend(deployed)
        except Exception as error:
            log.exception("reconcile: scheduling")
            report.errors.append(f"scheduling: {error!r}")
    elif cluster is not None and await cluster_nodes.aclaim_refresh(ctx.redis):
        try:  # with nothing queued, no pass publishes the nodes the API judges jobs by
            await scheduling.publish_nodes(ctx)
        except BackendUnavailable as error:
            report.errors.append(f"nodes: {error}")
    for job_id in unpurged:
        try:
            outcome = await operations.delete_job(ctx, job_id)
            if outcome.retry_after is None:
                report.finished.append(job_id)
        except Exception as error:
            log.exception("reconcile: deleting job %s", job_id)
            report.errors.append(f"{job_id}: {error!r}")
    if report:
        log.info("reconcile: %s", report)
    return report


async def _load(
    ctx: Context, cluster_jobs: set[str]
) -> tuple[list[_JobFacts], dict[str, _JobFacts], list[str]]:
    async with ctx.sessions() as session:
        open_rows = await repo.open_jobs(session)
        rows: dict[str, Job] = {job.id: job for job in open_rows}
        for job_id in cluster_jobs - set(rows):
            job = await repo.get_job_any(session, job_id)
            if job is not None:
                rows[job_id] = job
        queued = [job.id for job in open_rows if job.state == JobState.QUEUED]
        admitted_at = await scheduling.admissions(session, queued)
        facts = {}
        for job in rows.values():
            learners = await repo.learners_of(session, job.id) if job in open_rows else []
            halting = job.state in ACTIVE_STATES and any(
                row.state in (LearnerState.STOPPING, LearnerState.STOPPED) for row in learners
            )
            facts[job.id] = _JobFacts(
                id=job.id,
                state=JobState(job.state),
                desired=Desired(job.desired),
                attempt=job.attempt,
                elastic=autoscaling.is_elastic(job.manifest),
                deleted=job.deleted_at is not None,
                age=ctx.age(job.updated_at),
                halting=halting,
                attempts={row.index: row.attempt for row in learners},
                admitted_age=ctx.age(admitted_at[job.id]) if job.id in admitted_at else None,
            )
        unpurged = [job.id for job in await operations.deleted_unpurged(session)]
    return [facts[job.id] for job in open_rows], facts, unpurged


async def _stop_unwanted(
    ctx: Context,
    by_job: dict[str, list[LearnerStatus]],
    known: dict[str, _JobFacts],
    report: ReconcileReport,
) -> None:
    for job_id, learners in by_job.items():
        facts = known.get(job_id)
        live = [learner for learner in learners if not learner.stopping]
        if not live:
            continue
        if facts is None or not facts.wants_learners:
            # A halted job may be resumed, and deployed again, after these facts were read:
            # its newer attempt is spared. A gone or finished one is done with altogether.
            halted = facts is not None and facts.state is JobState.HALTED and not facts.deleted
            up_to = facts.attempt if facts is not None and halted else None
            await ctx.backend.delete_learners(job_id, up_to_attempt=up_to)
            report.stopped.append(job_id)
            continue
        for learner in live:
            if not facts.wants(learner):
                await ctx.backend.delete_learner(learner.name)
                report.stopped.append(learner.name)


async def _drive(
    ctx: Context,
    facts: _JobFacts,
    learners: list[LearnerStatus],
    listed_at: datetime | None,  # when `learners` were listed; None: the cluster was not
    report: ReconcileReport,
) -> None:
    lost_nudge = facts.age >= ctx.timings.requeue_after_s
    if facts.desired is Desired.HALT:
        outcome = await operations.halt_job(ctx, facts.id)
        if outcome.retry_after is None:
            report.finished.append(facts.id)
    elif facts.desired is not Desired.RUN:
        return
    elif facts.state is JobState.HALTED:
        if lost_nudge:  # resumed by the user; its resume task was lost
            outcome = await operations.resume_job(ctx, facts.id)
            if outcome.retry_after is None:
                report.finished.append(facts.id)
    elif facts.state is JobState.QUEUED:
        # The sweep's scheduling pass weighs every queued job at once; one it admitted
        # whose deploy never came is deployed here.
        if facts.admitted_age is not None and facts.admitted_age >= ctx.timings.requeue_after_s:
            await operations.deploy_job(ctx, facts.id)
            report.deployed.append(facts.id)
    elif facts.state is JobState.RECOVERING:
        if lost_nudge:  # its restart task was lost
            outcome = await operations.recover_job(ctx, facts.id)
            if outcome.retry_after is None:
                report.deployed.append(facts.id)
    elif facts.state is JobState.RESCALING:
        outcome = await operations.finish_resize(ctx, facts.id)
        if outcome.retry_after is None:
            report.deployed.append(facts.id)
    elif facts.halting:
        outcome = await operations.resume_job(ctx, facts.id)
        if outcome.retry_after is None:
            report.finished.append(facts.id)
    elif listed_at is not None:
        seen = await apply_cluster_view(ctx, facts.id, learners, listed_at)
        if seen.exits or seen.vanished:
            report.updated.append(facts.id)
        if seen.not_created:
            await operations.deploy_job(ctx, facts.id)
            report.deployed.append(facts.id)
    else:
        await settle_job(ctx, facts.id)
