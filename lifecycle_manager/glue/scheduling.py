"""What a scheduling pass reads and records: the platform as `scheduler.schedule` sees it,
and what it decided.

`scheduling_pass.run_pass` runs one pass at a time (the scheduler's lease), each on what the
one before it committed:

    backend.nodes()  +  teams' quotas  +  queued and running jobs (database)
        -> cluster_snapshot.snapshot -> scheduler.schedule
        -> an `admitted` event per admission (its placement), the reason of every job that
           waits (a `waiting` event when the cause changes), the queue for `dlaas queue`

The caller acts on the pass (`operations.schedule_pass`): it deploys the admitted jobs and
asks the victims of a preemption to checkpoint and stop. An admission is recorded before
anything is deployed, so a pass that runs in between counts the admitted job as running.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from lifecycle_manager.glue.cluster_snapshot import JobRecord, Placement
from lifecycle_manager.glue.context import Context
from lifecycle_manager.scheduler import SchedulePass
from storage import cluster_nodes, queue_view
from storage import jobs as repo
from storage.job_states import ACTIVE_STATES, Desired, JobState
from storage.models import Job, JobEvent, Team

ADMITTED_EVENT = "admitted"
PREEMPTING_EVENT = "preempting"
WAITING_EVENT = "waiting"
_STATE_EVENT = "state"
CHECKPOINT_EVENT = "checkpoint"
_KINDS = (ADMITTED_EVENT, PREEMPTING_EVENT, WAITING_EVENT, _STATE_EVENT, CHECKPOINT_EVENT)
UNSCHEDULABLE = "unschedulable"  # the cause shown for a job the nodes, even empty, cannot hold


@dataclass(frozen=True)
class LoadedJobs:
    records: list[JobRecord]
    reasons: dict[str, str]  # queued job -> its reason now
    causes: dict[str, str]  # queued job -> the cause of its newest `waiting` event
    waiting_since: dict[str, float]  # queued job -> when its newest `waiting` event came


def _stamp(moment: datetime) -> float:
    if moment.tzinfo is None:  # SQLite hands back naive datetimes: they are UTC
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()


def placement_of(event: JobEvent) -> Placement:
    detail = event.detail
    return Placement(
        nodes=tuple(detail.get("nodes") or ()),
        gpu_product=detail.get("gpu_product"),
        borrowed=bool(detail.get("borrowed")),
    )


def admitted_since_queued(admitted: JobEvent | None, state: JobEvent | None) -> bool:
    """Whether a QUEUED job's newest admission came after it was (re)queued."""
    return admitted is not None and (state is None or admitted.id > state.id)


async def admissions(session: AsyncSession, job_ids: Iterable[str]) -> dict[str, datetime]:
    """Of these QUEUED jobs, those the scheduler admitted since they were (re)queued, with
    the time of the admission."""
    ids = list(job_ids)
    events = await repo.latest_events(session, ids, (ADMITTED_EVENT, _STATE_EVENT))
    found = {}
    for job_id in ids:
        admission = events.get((job_id, ADMITTED_EVENT))
        if admission is not None and admitted_since_queued(
            admission, events.get((job_id, _STATE_EVENT))
        ):
            found[job_id] = admission.time
    return found


async def admitted(session: AsyncSession, job: Job) -> bool:
    """Whether a QUEUED job was admitted by the scheduler since it was (re)queued."""
    return job.id in await admissions(session, [job.id])


async def placement_for(session: AsyncSession, job_id: str) -> Placement | None:
    """Where the job's newest admission put its learners; None if it has none."""
    event = await repo.latest_event(session, job_id, ADMITTED_EVENT)
    return placement_of(event) if event is not None else None


async def load_jobs(session: AsyncSession) -> LoadedJobs:
    states = [JobState.QUEUED.value, *(s.value for s in ACTIVE_STATES)]
    query = (
        select(Job, Team.name)
        .join(Team, Team.id == Job.team_id)
        .where(Job.state.in_(states), Job.deleted_at.is_(None))
    )
    rows = (await session.execute(query)).all()
    events = await repo.latest_events(session, [job.id for job, _ in rows], _KINDS)
    records, reasons, causes, since = [], {}, {}, {}
    for job, team in rows:
        admitted = events.get((job.id, ADMITTED_EVENT))
        preempting = events.get((job.id, PREEMPTING_EVENT))
        checkpoint = events.get((job.id, CHECKPOINT_EVENT))
        queued = job.state == JobState.QUEUED
        if queued and job.desired != Desired.RUN:
            continue  # halted or deleted before it ran: it waits for nothing
        holding = not queued or admitted_since_queued(admitted, events.get((job.id, _STATE_EVENT)))
        if not holding:
            reasons[job.id] = job.reason
            waiting = events.get((job.id, WAITING_EVENT))
            if waiting is not None:
                causes[job.id] = str(waiting.detail.get("cause", ""))
                since[job.id] = _stamp(waiting.time)
        records.append(
            JobRecord(
                id=job.id,
                team=team,
                manifest=job.manifest,
                submitted_at=_stamp(job.created_at),
                holding=holding,
                attempt=job.attempt,
                placement=placement_of(admitted) if admitted is not None else None,
                admitted_at=_stamp(admitted.time) if admitted is not None else None,
                last_checkpoint_at=_stamp(checkpoint.time) if checkpoint is not None else None,
                preempting=(
                    holding
                    and preempting is not None
                    and (admitted is None or preempting.id > admitted.id)
                ),
            )
        )
    return LoadedJobs(records, reasons, causes, since)


def _admission_reason(nodes: Iterable[str], borrowed: bool, backfilled: bool) -> str:
    where = ", ".join(sorted(set(nodes)))
    why = [f"admitted on {where}"]
    if borrowed:
        why.append("borrowing idle quota of other teams (it may be reclaimed)")
    if backfilled:
        why.append("ahead of the job holding the reservation, as it ends before that starts")
    return "; ".join(why)


def unschedulable_too_long(
    loaded: LoadedJobs, decided: SchedulePass, now: float, fail_after_s: float
) -> list[tuple[str, str]]:
    """The jobs, with their reasons, that no node set could hold for `fail_after_s` on end:
    each was refused by this pass and its newest `waiting` event says it was already."""
    return [
        (refusal.job_id, refusal.reason)
        for refusal in decided.refusals
        if loaded.causes.get(refusal.job_id) == UNSCHEDULABLE
        and now - loaded.waiting_since.get(refusal.job_id, now) >= fail_after_s
    ]


async def _fail_unschedulable(
    session: AsyncSession, failing: list[tuple[str, str]], fail_after_s: float
) -> set[str]:
    failed = set()
    for job_id, reason in failing:
        why = (
            f"never fit: {reason}; it stayed too big for the cluster for {fail_after_s:g} s "
            "(DLAAS_UNSCHEDULABLE_FAIL_AFTER_S)"
        )
        changed = await repo.transition(
            session,
            job_id,
            JobState.FAILED,
            why,
            {"cause": UNSCHEDULABLE},
            only_from=[JobState.QUEUED],
        )
        if changed.changed:
            failed.add(job_id)
    return failed


async def record_pass(
    session: AsyncSession,
    decided: SchedulePass,
    loaded: LoadedJobs,
    now: datetime,
    fail_after_s: float,
) -> queue_view.QueueView:
    teams = {record.id: record.team for record in loaded.records}
    attempts = {record.id: record.attempt for record in loaded.records}
    for admission in decided.admissions:
        await repo.add_event(
            session,
            admission.job_id,
            ADMITTED_EVENT,
            _admission_reason(admission.nodes, admission.borrowed, admission.backfilled),
            {
                "attempt": attempts.get(admission.job_id, 0),
                "nodes": list(admission.nodes),
                "gpu_product": admission.gpu_product,
                "borrowed": admission.borrowed,
                "backfilled": admission.backfilled,
            },
        )
    failed = await _fail_unschedulable(
        session,
        unschedulable_too_long(loaded, decided, now.timestamp(), fail_after_s),
        fail_after_s,
    )
    queued: list[queue_view.QueuedJob] = []
    waits = [(w.job_id, str(w.cause), w.reason, w.estimated_start) for w in decided.waiting]
    unschedulable = [
        (r.job_id, UNSCHEDULABLE, f"too big for the cluster as it is now: {r.reason}", None)
        for r in decided.refusals
        if r.job_id not in failed
    ]
    for position, (job_id, cause, reason, start) in enumerate([*waits, *unschedulable], 1):
        if reason != loaded.reasons.get(job_id):
            await repo.set_waiting_reason(session, job_id, reason)
        if cause != loaded.causes.get(job_id):
            await repo.add_event(session, job_id, WAITING_EVENT, reason, {"cause": cause})
        queued.append(
            queue_view.QueuedJob(
                job_id=job_id,
                team=teams.get(job_id, ""),
                position=position,
                cause=cause,
                reason=reason,
                estimated_start=datetime.fromtimestamp(start, UTC) if start is not None else None,
            )
        )
    return queue_view.QueueView(at=now, jobs=queued)


async def publish_nodes(ctx: Context) -> None:
    """Publish what the cluster's nodes offer now (raises BackendUnavailable)."""
    await cluster_nodes.apublish_nodes(ctx.redis, await ctx.backend.nodes())
