"""Apply what learners report (events) or what the cluster shows (reconcile) to a job.

Each report is handled in one transaction: learner row, then the job's decision from
`job_progress.decide`, then (after commit) the decision's actions. A report about an older
attempt of its learner than the one its row holds (each row holds the attempt its learner
was last created in), or about a learner already finished, changes nothing, so a redelivered
event, or a late one from a learner restarted meanwhile, is harmless.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from redis.exceptions import RedisError
from sqlalchemy.ext.asyncio import AsyncSession

from lifecycle_manager.backends.base import OOM_KILLED_FIELD, BackendUnavailable, LearnerStatus
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
    decide,
    learner_after_exit,
    learner_after_status,
    observe_cluster,
)
from lifecycle_manager.restart_policy import (
    Cause,
    Failure,
    RestartPolicy,
    RestartScope,
    classify,
    with_restart_policy,
)
from storage import jobs as repo
from storage import streams
from storage.job_states import FINAL_STATES, JobState, is_final
from storage.models import Job, Learner

log = logging.getLogger(__name__)

VANISHED = "vanished without a recorded exit"
INTERRUPTED = "interrupted while it should run"
RESTART_EVENT = "restart"


def learner_view(row: Learner) -> LearnerView:
    return LearnerView(
        row.index, LearnerState(row.state), row.exit_code, row.reason, row.signal, row.oom_killed
    )


def job_view(job: Job, rows: Sequence[LearnerView]) -> JobView:
    return JobView(JobState(job.state), Desired(job.desired), tuple(rows))


async def _current(session: AsyncSession, job_id: str) -> tuple[Job, dict[int, Learner]] | None:
    job = await repo.get_job_any(session, job_id)
    if job is None:
        return None
    rows = {row.index: row for row in await repo.learners_of(session, job_id)}
    return job, rows


async def _record(
    session: AsyncSession,
    job: Job,
    attempt: int,
    update: LearnerView,
    detail: Mapping[str, object],
) -> bool:
    """Record a learner's new state, if its row still holds `attempt` of it."""
    changed = await repo.set_learner_state(
        session,
        job.id,
        update.index,
        attempt,
        update.state.value,
        exit_code=update.exit_code,
        reason=update.reason,
        signal=update.signal,
        oom_killed=update.oom_killed,
    )
    if changed and update.state in ENDING and update.state is not LearnerState.STOPPING:
        await repo.add_event(
            session,
            job.id,
            "learner_exit",
            f"learner {update.index} {update.state.value.lower()}: {update.reason}",
            {"learner": update.index, "attempt": attempt, **detail},
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
    oom_killed: bool | None = None,
) -> LearnerView | None:
    """The learner's row after its exit; `stopped`: the cluster stopped it on request.

    A learner stopped while the lifecycle manager still wants it (not halting, deleting,
    finishing or restarting its gang) was interrupted: its row fails, with a reason saying so,
    and the restart policy resumes the job without counting a restart.
    """
    previous = LearnerState(row.state)
    if previous in ENDING - {LearnerState.STOPPING}:
        return None
    # A job that already finished, or is restarting its gang, stops its remaining learners:
    # their exits are no failures. A job restarting one learner (scope `learner`) leaves the
    # others running: how they end still counts.
    scope = RestartPolicy.from_manifest(job.manifest).scope
    winding_down = JobState(job.state) in FINAL_STATES or (
        job.state == JobState.RECOVERING and scope is RestartScope.GANG
    )
    state, why = learner_after_exit(
        previous, Desired(job.desired), exit_code, signal, reason, stopped=winding_down
    )
    if stopped and state is LearnerState.FAILED:
        why = f"{INTERRUPTED}: {why}"
    return LearnerView(row.index, state, exit_code, why, signal, oom_killed)


def _failure_of(view: LearnerView) -> Failure:
    cause = classify(view.exit_code, view.signal, oom_killed=view.oom_killed)
    return Failure(view.index, cause, view.reason, view.exit_code, signal=view.signal)


async def restart_history(session: AsyncSession, job_id: str) -> list[Failure]:
    """The failures that restarted this job so far, oldest first."""
    events = await repo.events_of_kind(session, job_id, RESTART_EVENT)
    return [Failure.from_detail(event.detail.get("failure", {})) for event in events]


async def newest_checkpoint(
    session: AsyncSession, job_id: str, learner: int | None = None
) -> str | None:
    """The job's newest committed checkpoint; with `learner`, that learner's own."""
    event = await repo.latest_event(session, job_id, "checkpoint", learner=learner)
    return str(event.detail.get("name")) if event is not None else None


async def _with_policy(
    session: AsyncSession, job: Job, decision: Decision, failure: Failure
) -> Decision:
    policy = RestartPolicy.from_manifest(job.manifest)
    own = failure.learner if policy.scope is RestartScope.LEARNER else None
    checkpoint = await newest_checkpoint(session, job.id, own)
    failure = replace(failure, checkpoint=checkpoint, reason=decision.reason)
    history = await restart_history(session, job.id)
    decision, verdict = with_restart_policy(decision, policy, failure, history)
    detail = {"failure": failure.to_detail(), "attempt": job.attempt, "delay_s": verdict.delay_s}
    if verdict.restart:
        await repo.add_event(session, job.id, RESTART_EVENT, verdict.reason, detail)
    else:
        await repo.add_event(session, job.id, "restart_refused", verdict.reason, detail)
    return decision


async def _decide(
    session: AsyncSession,
    job: Job,
    rows: Sequence[LearnerView],
    failures: Mapping[int, Failure] | None = None,
) -> Decision:
    """Apply what `decide` (and, for a failure, the restart policy) says.

    NO_CHANGE if the job moved meanwhile.
    """
    decision = decide(job_view(job, rows))
    if decision.target is None:
        return NO_CHANGE
    if decision.failed_learner is not None:
        failed = (failures or {}).get(decision.failed_learner)
        if failed is None:
            view = next(r for r in rows if r.index == decision.failed_learner)
            failed = _failure_of(view)
        decision = await _with_policy(session, job, decision, failed)
    for state in (*decision.via, decision.target):
        assert state is not None
        changes: dict[str, Any] = (
            {"restarts": job.restarts + 1} if state is JobState.RECOVERING else {}
        )
        result = await repo.transition(
            session, job.id, state, decision.reason, {"attempt": job.attempt}, **changes
        )
        if not result.changed:
            return NO_CHANGE
    return decision


async def carry_out(ctx: Context, job_id: str, decision: Decision) -> None:
    """The side effects of an applied decision, after its transaction committed."""
    await run_actions(ctx, job_id, decision.actions, decision.delay_s, decision.failed_learner)
    if decision.target is not None and is_final(decision.target):
        try:
            await streams.aretire_job_streams(ctx.redis, job_id)
        except RedisError as error:
            log.warning("job %s: could not set its streams to expire: %s", job_id, error)


async def run_actions(
    ctx: Context,
    job_id: str,
    actions: Sequence[Action],
    delay_s: float = 0.0,
    failed_learner: int | None = None,
) -> None:
    restarting = Action.RESTART in actions
    grace = ctx.timings.restart_grace_s if restarting else None
    for action in actions:
        try:
            if action is Action.RESTART:
                await ctx.schedule_recovery(job_id, delay_s)
            elif action is Action.STOP_LEARNERS:
                await ctx.backend.delete_learners(job_id, grace=grace)
            elif action is Action.STOP_FAILED_LEARNER and failed_learner is not None:
                await ctx.backend.delete_learner_of(job_id, failed_learner, grace=grace)
        except BackendUnavailable as error:
            log.warning("job %s: could not stop learners (the reconcile will): %s", job_id, error)


def _exit_code(fields: Mapping[str, str]) -> int | None:
    try:
        return int(fields.get("exit_code", ""))
    except ValueError:
        return None


def _oom_killed(fields: Mapping[str, str]) -> bool | None:
    """The cluster's word on an out-of-memory kill, where the exit report carries one."""
    value = fields.get(OOM_KILLED_FIELD, "")
    return value == "1" if value else None


async def apply_learner_event(ctx: Context, event: streams.LearnerEvent) -> None:
    fields = event.fields
    async with ctx.sessions.begin() as session:
        found = await _current(session, event.job)
        if found is None:
            return
        job, rows = found
        row = rows.get(event.learner)
        if row is None or event.attempt != row.attempt:
            return
        if event.kind == streams.CHECKPOINT and fields.get("restored") == "1":
            name = fields.get("name", "")
            await repo.add_event(
                session,
                job.id,
                "resumed",
                f"learner {event.learner} resumed from checkpoint {name}",
                {"name": name, "learner": event.learner, "attempt": event.attempt},
            )
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
        # The agent stopped it on request, or its runner was told to stop.
        stopped = fields.get("deleted") == "1" or fields.get("stopped") == "1"
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
                stopped=stopped,
                oom_killed=_oom_killed(fields),
            )
        if update is None:
            return
        detail = {
            "exit_code": update.exit_code,
            "signal": fields.get("signal") or None,
            "source": fields.get("source", ""),
        }
        if not await _record(session, job, row.attempt, update, detail):
            return
        views = [update if r.index == update.index else learner_view(r) for r in rows.values()]
        failures = {}
        if update.state is LearnerState.FAILED:
            failure = replace(_failure_of(update), last_line=fields.get("last_line", ""))
            if stopped:
                failure = replace(failure, cause=Cause.INTERRUPTED)
            failures[update.index] = failure
        decision = await _decide(session, job, views, failures)
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
            ClusterLearner(s.learner, s.finished, s.exit_code, s.signal, s.reason, s.oom_killed)
            for s in statuses
            if s.learner in rows and s.attempt == rows[s.learner].attempt
        ]
        view = job_view(job, list(views.values()))
        seen = observe_cluster(
            view,
            cluster,
            age=ctx.age(job.updated_at),
            grace=ctx.timings.deploy_grace_s,
            redeploy_after=ctx.timings.redeploy_after_s,
        )
        failures = {
            index: Failure(index, Cause.VANISHED, f"learner {index} {VANISHED}")
            for index in seen.vanished
        }
        updates = [
            _after_exit(
                job,
                rows[s.index],
                s.exit_code,
                s.signal,
                s.reason,
                stopped=False,
                oom_killed=s.oom_killed,
            )
            for s in seen.exits
        ]
        updates += [LearnerView(i, LearnerState.FAILED, None, VANISHED) for i in seen.vanished]
        for update in updates:
            if update is None:
                continue
            attempt = rows[update.index].attempt
            if await _record(session, job, attempt, update, {"source": "reconcile"}):
                views[update.index] = update
        decision = NO_CHANGE
        if updates:
            decision = await _decide(session, job, list(views.values()), failures)
    await carry_out(ctx, job_id, decision)
    return seen


async def apply_stored_rows(ctx: Context, job_id: str) -> None:
    """Decide on the job's rows as they stand. A learner that ended while the job was
    RECOVERING or QUEUED was recorded then but not acted on (the next attempt decides): a
    deploy that kept some learners running calls this once the others are created, so that
    end is acted on at once."""
    async with ctx.sessions.begin() as session:
        found = await _current(session, job_id)
        if found is None:
            return
        job, rows = found
        decision = await _decide(session, job, [learner_view(row) for row in rows.values()])
    await carry_out(ctx, job_id, decision)


async def apply_silence(ctx: Context, job_id: str, silent: Mapping[int, float]) -> None:
    """Learners that stopped sending heartbeats failed: the restart policy takes it from there."""
    async with ctx.sessions.begin() as session:
        found = await _current(session, job_id)
        if found is None:
            return
        job, rows = found
        views = {index: learner_view(row) for index, row in rows.items()}
        failures = {}
        for index, silence in sorted(silent.items()):
            reason = f"no heartbeat for {silence:.0f} s: the learner hung"
            update = LearnerView(index, LearnerState.FAILED, None, reason)
            if index in rows and await _record(
                session, job, rows[index].attempt, update, {"source": "heartbeat"}
            ):
                views[index] = update
                failures[index] = Failure(index, Cause.HEARTBEAT, f"learner {index}: {reason}")
        decision = NO_CHANGE
        if failures:
            decision = await _decide(session, job, list(views.values()), failures)
    await carry_out(ctx, job_id, decision)
