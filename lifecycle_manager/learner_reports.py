"""Apply what learners report (events) or what the cluster shows (reconcile) to a job.

Each report is handled in one transaction: learner row, then the job's decision from
`job_progress.decide`, then (after commit) the decision's actions. A report about an older
attempt, or about a learner already finished, changes nothing, so a redelivered event is
harmless.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

from redis.exceptions import RedisError
from sqlalchemy.ext.asyncio import AsyncSession

from lifecycle_manager.backends.base import BackendUnavailable, LearnerStatus
from lifecycle_manager.context import Context
from lifecycle_manager.job_progress import (
    ENDING,
    NO_CHANGE,
    Action,
    ClusterLearner,
    Decision,
    Desired,
    JobView,
    LearnerState,
    LearnerView,
    Observation,
    all_vanished,
    decide,
    learner_after_exit,
    learner_after_status,
    observe_cluster,
)
from storage import jobs as repo
from storage import streams
from storage.job_states import FINAL_STATES, JobState, is_final
from storage.models import Job, Learner

log = logging.getLogger(__name__)

VANISHED = "vanished without a recorded exit"


def learner_view(row: Learner) -> LearnerView:
    return LearnerView(row.index, LearnerState(row.state), row.exit_code, row.reason)


def job_view(job: Job, rows: Sequence[LearnerView]) -> JobView:
    return JobView(JobState(job.state), Desired(job.desired), tuple(rows))


async def _current(session: AsyncSession, job_id: str) -> tuple[Job, dict[int, Learner]] | None:
    job = await repo.get_job_any(session, job_id)
    if job is None:
        return None
    rows = {row.index: row for row in await repo.learners_of(session, job_id)}
    return job, rows


async def _record(
    session: AsyncSession, job: Job, update: LearnerView, detail: Mapping[str, object]
) -> bool:
    changed = await repo.set_learner_state(
        session,
        job.id,
        update.index,
        job.attempt,
        update.state.value,
        exit_code=update.exit_code,
        reason=update.reason,
    )
    if changed and update.state in ENDING and update.state is not LearnerState.STOPPING:
        await repo.add_event(
            session,
            job.id,
            "learner_exit",
            f"learner {update.index} {update.state.value.lower()}: {update.reason}",
            {"learner": update.index, "attempt": job.attempt, **detail},
        )
    return changed


def _after_exit(
    job: Job,
    row: Learner,
    exit_code: int | None,
    signal: str | None,
    reason: str,
    *,
    stopped: bool,
) -> LearnerView | None:
    previous = LearnerState(row.state)
    if previous in ENDING - {LearnerState.STOPPING}:
        return None
    # A job that already finished stops its remaining learners: their exits are no failures.
    stopped = stopped or JobState(job.state) in FINAL_STATES
    state, why = learner_after_exit(
        previous, Desired(job.desired), exit_code, signal, reason, stopped=stopped
    )
    return LearnerView(row.index, state, exit_code, why)


async def _decide(session: AsyncSession, job: Job, rows: Sequence[LearnerView]) -> Decision:
    """Apply what `decide` says; NO_CHANGE if the job moved meanwhile."""
    decision = decide(job_view(job, rows))
    if decision.target is None:
        return NO_CHANGE
    for state in (*decision.via, decision.target):
        result = await repo.transition(
            session, job.id, state, decision.reason, {"attempt": job.attempt}
        )
        if not result.changed:
            return NO_CHANGE
    return decision


async def carry_out(ctx: Context, job_id: str, decision: Decision) -> None:
    """The side effects of an applied decision, after its transaction committed."""
    await run_actions(ctx, job_id, decision.actions)
    if decision.target is not None and is_final(decision.target):
        try:
            await streams.aretire_job_streams(ctx.redis, job_id)
        except RedisError as error:
            log.warning("job %s: could not set its streams to expire: %s", job_id, error)


async def run_actions(ctx: Context, job_id: str, actions: Sequence[Action]) -> None:
    for action in actions:
        if action is Action.STOP_LEARNERS:
            try:
                await ctx.backend.delete_learners(job_id)
            except BackendUnavailable as error:
                log.warning(
                    "job %s: could not stop learners (the reconcile will): %s", job_id, error
                )


def _exit_code(fields: Mapping[str, str]) -> int | None:
    try:
        return int(fields.get("exit_code", ""))
    except ValueError:
        return None


async def apply_learner_event(ctx: Context, event: streams.LearnerEvent) -> None:
    fields = event.fields
    async with ctx.sessions.begin() as session:
        found = await _current(session, event.job)
        if found is None:
            return
        job, rows = found
        row = rows.get(event.learner)
        if event.attempt != job.attempt or row is None or row.attempt != job.attempt:
            return
        if event.kind == streams.CHECKPOINT:
            name = fields.get("name", "")
            await repo.add_event(
                session,
                job.id,
                "checkpoint",
                f"checkpoint {name} committed",
                {"name": name, "learner": event.learner, "attempt": event.attempt},
            )
            return
        update: LearnerView | None = None
        reported = fields.get("state", "")
        if event.kind == streams.STATUS and reported in LearnerState.__members__:
            state = learner_after_status(LearnerState(row.state), LearnerState(reported))
            if state is not None:
                update = LearnerView(row.index, state)
        elif event.kind == streams.EXIT:
            update = _after_exit(
                job,
                row,
                _exit_code(fields),
                fields.get("signal") or None,
                fields.get("reason", ""),
                stopped=fields.get("deleted") == "1",
            )
        if update is None:
            return
        detail = {
            "exit_code": update.exit_code,
            "signal": fields.get("signal") or None,
            "source": fields.get("source", ""),
        }
        if not await _record(session, job, update, detail):
            return
        views = [update if r.index == update.index else learner_view(r) for r in rows.values()]
        decision = await _decide(session, job, views)
    await carry_out(ctx, job.id, decision)


async def apply_cluster_view(
    ctx: Context, job_id: str, statuses: Sequence[LearnerStatus]
) -> Observation:
    """Bring a running job's learner rows in line with the cluster; returns what was seen."""
    async with ctx.sessions.begin() as session:
        found = await _current(session, job_id)
        if found is None:
            return Observation()
        job, rows = found
        views = {index: learner_view(row) for index, row in rows.items()}
        cluster = [
            ClusterLearner(s.learner, s.finished, s.exit_code, s.signal, s.reason)
            for s in statuses
            if s.attempt == job.attempt
        ]
        view = job_view(job, list(views.values()))
        seen = observe_cluster(
            view, cluster, age=ctx.age(job.updated_at), grace=ctx.timings.deploy_grace_s
        )
        decision = NO_CHANGE
        if all_vanished(view, seen):
            names = ", ".join(str(index) for index in seen.vanished)
            result = await repo.transition(
                session,
                job.id,
                JobState.FAILED,
                f"learners vanished: no exit was recorded for learner {names}",
                {"attempt": job.attempt, "vanished": list(seen.vanished)},
            )
            for index in seen.vanished:
                failed = LearnerView(index, LearnerState.FAILED, None, VANISHED)
                await _record(session, job, failed, {"source": "reconcile"})
            if result.changed:
                decision = Decision(JobState.FAILED, actions=(Action.STOP_LEARNERS,))
        elif seen.exits or seen.vanished:
            updates = [
                _after_exit(job, rows[s.index], s.exit_code, s.signal, s.reason, stopped=False)
                for s in seen.exits
            ]
            updates += [LearnerView(i, LearnerState.FAILED, None, VANISHED) for i in seen.vanished]
            for update in updates:
                if update is not None and await _record(
                    session, job, update, {"source": "reconcile"}
                ):
                    views[update.index] = update
            decision = await _decide(session, job, list(views.values()))
    await carry_out(ctx, job_id, decision)
    return seen
