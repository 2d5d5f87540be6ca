"""The job repository: jobs, their events and learners, and state transitions.

Every state change goes through `transition`, a conditional update that succeeds only from
an allowed predecessor, and records an event in the same transaction.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import and_, func, or_, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from storage import job_credentials
from storage.job_states import (
    ACTIVE_STATES,
    STOPPED_STATES,
    Desired,
    JobState,
    LearnerState,
    check_transition,
    predecessors,
)
from storage.models import Job, JobEvent, Learner, utcnow
from storage.teams import personal_team_id

log = logging.getLogger(__name__)

_ID_ALPHABET = "abcdefghijkmnpqrstuvwxyz23456789"
# Every id new_job_id makes, and nothing longer than the column or unfit for a pod's name
JOB_ID_PATTERN = r"^[a-z0-9][a-z0-9-]{0,39}$"


def new_job_id() -> str:
    return "training-" + "".join(secrets.choice(_ID_ALPHABET) for _ in range(10))


@dataclass(frozen=True)
class TransitionResult:
    changed: bool
    previous: JobState | None


async def create_job(
    session: AsyncSession,
    *,
    owner_id: int,
    name: str,
    learners: int,
    manifest: dict[str, Any],
    job_id: str | None = None,
    team_id: int | None = None,
) -> Job:
    """A new QUEUED job of `team_id`'s (by default, of the owner's own team)."""
    if team_id is None:
        team_id = await personal_team_id(session, owner_id)
        if team_id is None:
            raise ValueError(f"user {owner_id} has no team of their own: name the job's team")
    job = Job(
        id=job_id or new_job_id(),
        owner_id=owner_id,
        team_id=team_id,
        name=name,
        state=JobState.QUEUED,
        reason="waiting to be deployed",
        learners=learners,
        manifest=manifest,
    )
    session.add(job)
    session.add(
        JobEvent(job_id=job.id, kind="submitted", to_state=JobState.QUEUED, reason="job submitted")
    )
    await session.flush()
    return job


async def get_job_any(session: AsyncSession, job_id: str) -> Job | None:
    """A job whether or not it was deleted (for the lifecycle manager)."""
    return await session.get(Job, job_id, populate_existing=True)


async def lock_job(session: AsyncSession, job_id: str) -> Job | None:
    """The job's row as it stands, locked until the transaction ends.

    Every decision about a job starts here, so the processes that decide (monitor,
    reconcile, workers, API) take turns per job and each decides on what the one before it
    committed, never on a state read before another process changed it.
    """
    if session.get_bind().dialect.name == "sqlite":
        # SQLite locks the whole database, and only for a write: a write that changes
        # nothing takes the lock, which the transaction holds until it ends.
        await session.execute(
            update(Job)
            .where(Job.id == job_id)
            .values(state=Job.state)
            .execution_options(synchronize_session=False)
        )
    query = (
        select(Job)
        .where(Job.id == job_id)
        .with_for_update(key_share=True)
        .execution_options(populate_existing=True)
    )
    return (await session.execute(query)).scalar_one_or_none()


async def jobs_in_states(session: AsyncSession, states: Sequence[JobState]) -> Sequence[Job]:
    query = select(Job).where(Job.state.in_([str(s) for s in states])).order_by(Job.created_at)
    return (await session.execute(query)).scalars().all()


async def open_jobs(session: AsyncSession) -> Sequence[Job]:
    """Jobs the lifecycle manager has work on: neither final nor halted as the user asked
    (a HALTED job the user resumed is open: it is to be deployed again)."""
    waiting = or_(
        Job.state.in_([str(s) for s in (JobState.QUEUED, *ACTIVE_STATES)]),
        and_(Job.state == JobState.HALTED.value, Job.desired == Desired.RUN.value),
    )
    query = select(Job).where(Job.deleted_at.is_(None), waiting).order_by(Job.created_at)
    return (await session.execute(query)).scalars().all()


async def add_event(
    session: AsyncSession,
    job_id: str,
    kind: str,
    reason: str = "",
    detail: dict[str, Any] | None = None,
    *,
    from_state: str | None = None,
    to_state: str | None = None,
) -> None:
    session.add(
        JobEvent(
            job_id=job_id,
            kind=kind,
            reason=reason,
            detail=detail or {},
            from_state=from_state,
            to_state=to_state,
        )
    )
    await session.flush()


async def transition(
    session: AsyncSession,
    job_id: str,
    target: JobState,
    reason: str,
    detail: dict[str, Any] | None = None,
    *,
    only_from: Sequence[JobState] | None = None,
    keep_credentials: bool = False,
    **changes: Any,
) -> TransitionResult:
    """Move a job to `target` if the table allows it from its current state.

    Returns whether the job changed. A refused transition changes nothing and is logged;
    callers racing on the same job see exactly one winner. Moving to a state in which nothing
    of the job runs revokes its tokens, unless `keep_credentials`: a gang FAILED by one
    learner lets the others store their last checkpoint and log as they stop (the caller
    revokes once they are gone; `job_credentials.FAILED_GANG_GRACE_S` bounds it anyway).
    """
    current_row = await session.execute(select(Job.state).where(Job.id == job_id))
    current_value = current_row.scalar_one_or_none()
    if current_value is None:
        return TransitionResult(False, None)
    current = JobState(current_value)
    allowed = predecessors(target)
    if only_from is not None:
        allowed = allowed & frozenset(only_from)
    if current not in allowed:
        try:
            check_transition(current, target)
        except ValueError as refusal:
            log.warning("job %s: refused: %s (%s)", job_id, refusal, reason)
        return TransitionResult(False, current)
    result = await session.execute(
        update(Job)
        .where(Job.id == job_id, Job.state == current.value)
        .values(state=target.value, reason=reason, updated_at=utcnow(), **changes)
        .execution_options(synchronize_session=False)
    )
    if result.rowcount != 1:  # type: ignore[attr-defined]
        log.info("job %s: lost a race moving %s -> %s", job_id, current, target)
        return TransitionResult(False, current)
    await add_event(
        session, job_id, "state", reason, detail, from_state=current.value, to_state=target.value
    )
    if target in STOPPED_STATES and not keep_credentials:
        await job_credentials.revoke(session, job_id)  # nothing runs: neither do its tokens
    return TransitionResult(True, current)


async def set_waiting_reason(session: AsyncSession, job_id: str, reason: str) -> bool:
    """Say why a queued job waits, unless it left the queue meanwhile; whether it did."""
    result = await session.execute(
        update(Job)
        .where(
            Job.id == job_id,
            Job.state == JobState.QUEUED.value,
            Job.desired == Desired.RUN.value,
            Job.reason != reason,
        )
        .values(reason=reason)
        .execution_options(synchronize_session=False)
    )
    return bool(result.rowcount)  # type: ignore[attr-defined]


async def mark_deleted(session: AsyncSession, job_id: str, reason: str) -> bool:
    """The user deleted the job: it is DELETED at once, whatever it was doing, and the
    lifecycle manager stops its learners and removes what it stored. Whether it moved."""
    job = await lock_job(session, job_id)
    if job is None or job.state == JobState.DELETED:
        return False
    changes = {"desired": Desired.DELETE.value, "deleted_at": job.deleted_at or utcnow()}
    await update_job(session, job_id, **changes)
    return (await transition(session, job_id, JobState.DELETED, reason)).changed


async def update_job(session: AsyncSession, job_id: str, **changes: Any) -> None:
    await session.execute(
        update(Job)
        .where(Job.id == job_id)
        .values(updated_at=utcnow(), **changes)
        .execution_options(synchronize_session=False)
    )


async def list_events(session: AsyncSession, job_id: str) -> Sequence[JobEvent]:
    query = select(JobEvent).where(JobEvent.job_id == job_id).order_by(JobEvent.id)
    return (await session.execute(query)).scalars().all()


async def learners_of(session: AsyncSession, job_id: str) -> Sequence[Learner]:
    query = (
        select(Learner)
        .where(Learner.job_id == job_id)
        .order_by(Learner.index)
        .execution_options(populate_existing=True)
    )
    return (await session.execute(query)).scalars().all()


async def learners_of_jobs(
    session: AsyncSession, job_ids: Collection[str]
) -> dict[str, list[Learner]]:
    """`learners_of` many jobs in one query."""
    found: dict[str, list[Learner]] = {job_id: [] for job_id in job_ids}
    if found:
        query = (
            select(Learner)
            .where(Learner.job_id.in_(list(found)))
            .order_by(Learner.job_id, Learner.index)
        )
        for row in (await session.execute(query)).scalars():
            found[row.job_id].append(row)
    return found


async def reset_learners(
    session: AsyncSession,
    job_id: str,
    count: int,
    attempt: int,
    only: Collection[int] | None = None,
) -> None:
    """Make the learner rows say `count` learners of `attempt`, all PENDING.

    With `only`, just those learners are created again; the others keep their rows (and the
    attempt they were created in).
    """
    existing = {learner.index: learner for learner in await learners_of(session, job_id)}
    for index in range(1, count + 1):
        learner = existing.pop(index, None)
        if only is not None and index not in only and learner is not None:
            continue
        if learner is None:
            session.add(Learner(job_id=job_id, index=index, attempt=attempt))
        else:
            learner.attempt = attempt
            learner.state = LearnerState.PENDING
            learner.exit_code = None
            learner.signal = None
            learner.oom_killed = None
            learner.cause = None
            learner.last_line = ""
            learner.reason = ""
            learner.updated_at = utcnow()
    for stale in existing.values():
        await session.delete(stale)
    await session.flush()


async def set_learner_state(
    session: AsyncSession,
    job_id: str,
    index: int,
    attempt: int,
    state: str,
    *,
    from_state: str | None = None,
    exit_code: int | None = None,
    reason: str = "",
    signal: str | None = None,
    oom_killed: bool | None = None,
    cause: str | None = None,
    last_line: str = "",
) -> bool:
    """Record a learner's state if the report is about its current attempt (and, with
    `from_state`, if the row still says that): whether the row changed."""
    query = update(Learner).where(
        Learner.job_id == job_id, Learner.index == index, Learner.attempt == attempt
    )
    if from_state is not None:
        query = query.where(Learner.state == from_state)
    result = await session.execute(
        query.values(
            state=state,
            exit_code=exit_code,
            signal=signal,
            oom_killed=oom_killed,
            cause=cause,
            last_line=last_line,
            reason=reason,
            updated_at=utcnow(),
        ).execution_options(synchronize_session=False)
    )
    return result.rowcount == 1  # type: ignore[attr-defined]


async def count_jobs(session: AsyncSession) -> int:
    return int((await session.execute(select(func.count()).select_from(Job))).scalar_one())


async def events_of_kind(session: AsyncSession, job_id: str, kind: str) -> Sequence[JobEvent]:
    query = (
        select(JobEvent)
        .where(JobEvent.job_id == job_id, JobEvent.kind == kind)
        .order_by(JobEvent.id)
    )
    return (await session.execute(query)).scalars().all()


async def latest_events(
    session: AsyncSession, job_ids: Collection[str], kinds: Collection[str]
) -> dict[tuple[str, str], JobEvent]:
    """For each of the jobs, its newest event of each of `kinds`, by (job id, kind)."""
    if not job_ids:
        return {}
    newest = (
        select(func.max(JobEvent.id))
        .where(JobEvent.job_id.in_(job_ids), JobEvent.kind.in_(kinds))
        .group_by(JobEvent.job_id, JobEvent.kind)
    )
    query = select(JobEvent).where(JobEvent.id.in_(newest))
    return {(e.job_id, e.kind): e for e in (await session.execute(query)).scalars()}


async def latest_event(
    session: AsyncSession, job_id: str, kind: str, *, learner: int | None = None
) -> JobEvent | None:
    """The job's newest event of `kind`; with `learner`, the newest about that learner."""
    query = select(JobEvent).where(JobEvent.job_id == job_id, JobEvent.kind == kind)
    if learner is not None:
        query = query.where(JobEvent.detail["learner"].as_integer() == learner)
    query = query.order_by(JobEvent.id.desc()).limit(1)
    return (await session.execute(query)).scalar_one_or_none()
