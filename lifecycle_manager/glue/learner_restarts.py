"""Which learners a restart stops and creates again, read from the job's rows and events.

A gang restart (`restart_policy.scope: gang`) re-creates every learner in the next attempt.
A learner restart (`scope: learner`) re-creates only the learner its `restart` event names:
its row is reset to the new attempt, while the other rows keep the attempt their learners
were created in, so those learners go on untouched and their reports still count, and late
reports from the replaced process (an older attempt than its row's) are ignored.
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy.ext.asyncio import AsyncSession

from lifecycle_manager.decisions.restart_policy import (
    RestartPolicy,
    RestartScope,
    learners_to_restart,
)
from lifecycle_manager.glue.learner_reports import RESTART_EVENT
from storage import jobs as repo
from storage.job_states import JobState
from storage.models import Job


def restart_scope(job: Job) -> RestartScope:
    return RestartPolicy.from_manifest(job.manifest).scope


async def restarting_learners(session: AsyncSession, job: Job) -> tuple[int, ...]:
    """The learners a RECOVERING job stops and creates again."""
    restart = await repo.latest_event(session, job.id, RESTART_EVENT)
    failure = (restart.detail.get("failure") or {}) if restart is not None else {}
    failed = failure.get("learner")
    return learners_to_restart(
        restart_scope(job), int(failed) if failed else None, int(job.learners)
    )


async def learners_to_create(session: AsyncSession, job: Job, attempt: int) -> Sequence[int] | None:
    """The learners a deploy of `attempt` resets and creates; None: all of them.

    A restart creates what `restarting_learners` says. A deploy that reuses the job's
    attempt (it never ran) creates again only the learners already reset for it.
    """
    if attempt == job.attempt:
        rows = await repo.learners_of(session, job.id)
        return [row.index for row in rows if row.attempt == attempt] or None
    if job.state == JobState.RECOVERING:
        return await restarting_learners(session, job)
    return None


def deploy_reason(attempt: int, only: Sequence[int] | None, num_learners: int) -> str:
    """The reason of the move to DEPLOYING, for the job's events."""
    if only is not None and len(only) < num_learners:
        names = ", ".join(str(index) for index in only)
        noun = "learner" if len(only) == 1 else "learners"
        return f"creating {noun} {names} again in attempt {attempt}"
    return "creating learners" if attempt == 1 else f"creating learners of attempt {attempt}"
