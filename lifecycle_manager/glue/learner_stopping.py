"""Learner rows of a job the lifecycle manager stops (halt, preemption): STOPPING while
their learners go, STOPPED once they are gone, so their exits are never read as failures."""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncSession

from storage import jobs as repo
from storage.job_states import LEARNER_ENDING, LEARNER_FINISHED, LearnerState


async def mark_stopping(session: AsyncSession, job_id: str, why: str) -> None:
    for row in await repo.learners_of(session, job_id):
        if LearnerState(row.state) not in LEARNER_ENDING:
            await repo.set_learner_state(
                session, job_id, row.index, row.attempt, LearnerState.STOPPING.value, reason=why
            )


async def mark_stopped(session: AsyncSession, job_id: str, why: str) -> None:
    for row in await repo.learners_of(session, job_id):
        if LearnerState(row.state) not in LEARNER_FINISHED:
            await repo.set_learner_state(
                session, job_id, row.index, row.attempt, LearnerState.STOPPED.value, reason=why
            )
