"""Apply what learners report (events) or what the cluster shows (reconcile) to a job.

Each report is handled in one transaction that starts by locking the job's row
(`storage.jobs.lock_job`), so the processes that act on a job (the monitor, the reconcile,
the workers) take turns and each reads what the one before it committed. The transaction
records the learner's row (a compare-and-set on its state), then settles the job: it asks
`job_progress.decide` for the next step on the job's whole stored state, applies it, and
asks again until the answer is "no change". After commit, the decisions' actions run.

Nothing is decided on a report alone: a failure is classed from what its row keeps (cause,
exit, last line), so a decision lost with a crashed process, or refused because the job
moved meanwhile, is taken again by whichever process settles the job next (the reconcile
settles every open job on each pass). A report about an older attempt of its learner than
the one its row holds, or about a learner already finished, changes nothing, so a
redelivered event, or a late one from a learner restarted meanwhile, is harmless.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

from redis.exceptions import RedisError
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm.attributes import set_committed_value

from lifecycle_manager.backends.base import OOM_KILLED_FIELD, BackendUnavailable, LearnerStatus
from lifecycle_manager.decisions.job_progress import (
    Action,
    ClusterLearner,
    Decision,
    JobView,
    LearnerView,
    Observation,
    decide,
    learner_after_exit,
    learner_after_status,
    observe_cluster,
)
from lifecycle_manager.decisions.restart_policy import (
    Cause,
    Failure,
    RestartPolicy,
    RestartScope,
    classify,
    with_restart_policy,
)
from lifecycle_manager.glue.context import Context
from storage import job_credentials, streams, usage
from storage import jobs as repo
from storage.job_states import (
    FINAL_STATES,
    LEARNER_BEATING,
    LEARNER_ENDING,
    LEARNER_FINISHED,
    STOPPED_STATES,
    Desired,
    JobState,
    LearnerState,
    is_final,
)
from storage.models import Job, Learner

log = logging.getLogger(__name__)

VANISHED = "vanished without a recorded exit"
INTERRUPTED = "interrupted while it should run"
RESTART_EVENT = "restart"
# A checkpoint the SDK could not write: a learner `checkpoint` event with a `failed` field.
CHECKPOINT_FAILED_EVENT = "checkpoint_failed"
# Settling moves a job forward at most a few times (progress, then an end); more means a bug.
MAX_SETTLE_ROUNDS = 8


def learner_view(row: Learner) -> LearnerView:
    return LearnerView(
        row.index,
        LearnerState(row.state),
        row.exit_code,
        row.reason,
        row.signal,
        row.oom_killed,
        row.cause,
        row.last_line,
    )


def job_view(job: Job, rows: Sequence[LearnerView]) -> JobView:
    return JobView(JobState(job.state), Desired(job.desired), tuple(rows))


@dataclass
class JobRows:
    """A job's row and its learner rows by index (locked for the transaction, when `lock`
    read them)."""

    job: Job
    rows: dict[int, Learner]

    def views(self) -> list[LearnerView]:
        return [learner_view(row) for row in self.rows.values()]


async def lock(session: AsyncSession, job_id: str) -> JobRows | None:
    return await _with_learners(session, await repo.lock_job(session, job_id))


async def _look(session: AsyncSession, job_id: str) -> JobRows | None:
    """The job and its learner rows as they stand, without locking them."""
    return await _with_learners(session, await repo.get_job_any(session, job_id))


def _remember(row: Job | Learner, **values: object) -> None:
    """What this transaction just wrote to a locked row, so the rest of it decides on that
    without reading the row again."""
    for name, value in values.items():
        set_committed_value(row, name, value)


async def _with_learners(session: AsyncSession, job: Job | None) -> JobRows | None:
    if job is None:
        return None
    return JobRows(job, {row.index: row for row in await repo.learners_of(session, job.id)})


async def _record(
    session: AsyncSession, job: Job, row: Learner, update: LearnerView, detail: Mapping[str, object]
) -> bool:
    """Record a learner's new state, if its row still holds the attempt and state read."""
    changed = await repo.set_learner_state(
        session,
        job.id,
        update.index,
        row.attempt,
        update.state.value,
        from_state=row.state,
        exit_code=update.exit_code,
        reason=update.reason,
        signal=update.signal,
        oom_killed=update.oom_killed,
        cause=update.cause,
        last_line=update.last_line,
    )
    if changed:
        _remember(
            row,
            state=update.state.value,
            exit_code=update.exit_code,
            reason=update.reason,
            signal=update.signal,
            oom_killed=update.oom_killed,
            cause=update.cause,
            last_line=update.last_line,
        )
    if changed and update.state in LEARNER_ENDING and update.state is not LearnerState.STOPPING:
        await repo.add_event(
            session,
            job.id,
            "learner_exit",
            f"learner {update.index} {update.state.value.lower()}: {update.reason}",
            {"learner": update.index, "attempt": row.attempt, **detail},
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
    last_line: str = "",
) -> LearnerView | None:
    """The learner's row after its exit; `stopped`: the cluster stopped it on request.

    A learner stopped while the lifecycle manager still wants it (not halting, deleting,
    finishing or restarting its gang) was interrupted: its row fails, with a reason saying so,
    and the restart policy resumes the job without counting a restart.
    """
    previous = LearnerState(row.state)
    if previous in LEARNER_ENDING - {LearnerState.STOPPING}:
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
    cause: str | None = None
    if state is LearnerState.FAILED:
        if stopped:
            why = f"{INTERRUPTED}: {why}"
            cause = Cause.INTERRUPTED.value
        else:
            cause = classify(exit_code, signal, oom_killed=oom_killed).value
    return LearnerView(
        row.index, state, exit_code, why, signal, oom_killed, cause, last_line if cause else ""
    )


def _failure_of(view: LearnerView) -> Failure:
    """The failure a FAILED row records: classed as it was reported, where it says."""
    known = {cause.value for cause in Cause}
    cause = (
        Cause(view.cause)
        if view.cause is not None and view.cause in known
        else classify(view.exit_code, view.signal, oom_killed=view.oom_killed)
    )
    return Failure(
        view.index, cause, view.reason, view.exit_code, last_line=view.last_line, signal=view.signal
    )


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


@dataclass(frozen=True)
class _Verdict:
    """A failure's decision under the restart policy, and the event that records why."""

    decision: Decision
    event: str
    reason: str
    detail: dict[str, Any]
    counted: bool  # the restart uses one of the policy's `max_restarts`


async def _with_policy(
    session: AsyncSession, job: Job, decision: Decision, failure: Failure
) -> _Verdict:
    policy = RestartPolicy.from_manifest(job.manifest)
    own = failure.learner if policy.scope is RestartScope.LEARNER else None
    checkpoint = await newest_checkpoint(session, job.id, own)
    failure = replace(failure, checkpoint=checkpoint, reason=decision.reason)
    history = await restart_history(session, job.id)
    decision, verdict = with_restart_policy(decision, policy, failure, history)
    detail = {"failure": failure.to_detail(), "attempt": job.attempt, "delay_s": verdict.delay_s}
    event = RESTART_EVENT if verdict.restart else "restart_refused"
    counted = verdict.restart and failure.cause is not Cause.INTERRUPTED
    return _Verdict(decision, event, verdict.reason, detail, counted)


async def _apply(
    session: AsyncSession, job: Job, decision: Decision, counted: bool, learners_done: bool
) -> bool:
    """Move the job through `decision.via` to its target; whether every move was made.
    `learners_done`: none of its learners runs (else a FAILED job keeps its tokens while
    they stop, see `repo.transition`)."""
    for state in (*decision.via, decision.target):
        assert state is not None
        counts = counted and state is JobState.RECOVERING
        changes: dict[str, Any] = {"restarts": job.restarts + 1} if counts else {}
        result = await repo.transition(
            session,
            job.id,
            state,
            decision.reason,
            {"attempt": job.attempt},
            keep_credentials=not learners_done,
            **changes,
        )
        if not result.changed:
            return False
        _remember(job, state=state.value, reason=decision.reason, **changes)
    return True


async def settle(session: AsyncSession, locked: JobRows) -> list[Decision]:
    """Take every step `decide` asks for on the job's stored state, until it asks none.

    A step refused because the job moved is no dead end: the job is read again and the
    next step decided on what it is now. Returns the steps taken, whose actions the caller
    carries out after commit.
    """
    taken: list[Decision] = []
    for _ in range(MAX_SETTLE_ROUNDS):
        job = locked.job
        views = locked.views()
        learners_done = all(view.state in LEARNER_FINISHED for view in views)
        decision = decide(job_view(job, views))
        if decision.target is None:
            if job.state == JobState.FAILED and learners_done:
                await job_credentials.revoke(session, job.id)  # the gang's last are gone
            return taken
        verdict: _Verdict | None = None
        if decision.failed_learner is not None:
            failed = next(view for view in views if view.index == decision.failed_learner)
            verdict = await _with_policy(session, job, decision, _failure_of(failed))
            decision = verdict.decision
        counted = verdict is not None and verdict.counted
        if await _apply(session, job, decision, counted, learners_done):
            taken.append(decision)
            if verdict is not None:
                await repo.add_event(session, job.id, verdict.event, verdict.reason, verdict.detail)
            continue  # the locked rows know what was written: decide again on them
        again = await lock(session, job.id)  # refused: read what the job is, decide again
        if again is None:
            return taken
        locked = again
    log.error("job %s: still deciding after %s steps: %s", locked.job.id, len(taken), taken)
    return taken


async def carry_out(ctx: Context, job_id: str, attempt: int, decisions: Sequence[Decision]) -> None:
    """The side effects of decisions applied to the job's `attempt`, after their
    transaction committed."""
    for decision in decisions:
        final = decision.target is not None and is_final(decision.target)
        await run_actions(
            ctx,
            job_id,
            decision.actions,
            decision.delay_s,
            decision.failed_learner,
            # A halted or restarting job may have moved on to a newer attempt by now; a
            # finished one never will, and what was made for it goes too.
            up_to_attempt=None if final else attempt,
        )
        if final:
            try:
                await streams.aretire_job_streams(ctx.redis, job_id)
            except RedisError as error:
                log.warning("job %s: could not set its streams to expire: %s", job_id, error)
            await count_results(ctx, job_id)
        if decision.target in STOPPED_STATES:
            await ctx.request_pass()  # its room goes to the queue now, not at the next sweep


async def count_results(ctx: Context, job_id: str) -> None:
    """Record what a final job's results take, for its owner's storage quota."""
    prefix = f"jobs/{job_id}/results/"
    try:
        size = await asyncio.to_thread(lambda: sum(o.size for o in ctx.objects.list(prefix)))
        async with ctx.sessions() as session, session.begin():
            await usage.set_results_bytes(session, job_id, size)
    except Exception as error:  # accounting must not stop the job's end being carried out
        log.warning("job %s: could not count its results: %s", job_id, error)


async def run_actions(
    ctx: Context,
    job_id: str,
    actions: Sequence[Action],
    delay_s: float = 0.0,
    failed_learner: int | None = None,
    *,
    up_to_attempt: int | None = None,
) -> None:
    restarting = Action.RESTART in actions
    grace = ctx.timings.restart_grace_s if restarting else None
    for action in actions:
        try:
            if action is Action.RESTART:
                await ctx.schedule_recovery(job_id, delay_s)
            elif action is Action.STOP_LEARNERS:
                await ctx.backend.delete_learners(job_id, grace=grace, up_to_attempt=up_to_attempt)
            elif action is Action.STOP_FAILED_LEARNER and failed_learner is not None:
                await ctx.backend.delete_learner_of(
                    job_id, failed_learner, grace=grace, up_to_attempt=up_to_attempt
                )
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


@dataclass(frozen=True)
class Settled:
    """Steps taken on a job's `attempt`, whose side effects are still to be carried out."""

    job_id: str
    attempt: int
    decisions: list[Decision]

    async def carry_out(self, ctx: Context) -> None:
        await carry_out(ctx, self.job_id, self.attempt, self.decisions)


async def apply_learner_events(
    ctx: Context, job_id: str, events: Sequence[streams.LearnerEvent]
) -> Settled | None:
    """Record one job's events, in order, in one transaction, and settle the job once;
    returns the steps taken, for the caller to carry out (`Settled.carry_out`).

    The monitor hands over what a batch read holds of each job together: a burst of
    learners reporting costs a transaction a job, not one an event.
    """
    async with ctx.sessions.begin() as session:
        locked = await lock(session, job_id)
        if locked is None:
            return None
        changed = False
        for event in events:
            changed = await _apply_event(session, locked, event) or changed
        if not changed:
            return None
        decisions = await settle(session, locked)
    return Settled(job_id, locked.job.attempt, decisions)


async def _apply_event(session: AsyncSession, locked: JobRows, event: streams.LearnerEvent) -> bool:
    """Record what one event says of its learner's row; whether the row changed."""
    fields = event.fields
    job = locked.job
    row = locked.rows.get(event.learner)
    if row is None or event.attempt != row.attempt:
        return False
    if event.kind == streams.CHECKPOINT:
        await _record_checkpoint(session, event)
        return False
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
            # The agent stopped it on request, or its runner was told to stop.
            stopped=fields.get("deleted") == "1" or fields.get("stopped") == "1",
            oom_killed=_oom_killed(fields),
            last_line=fields.get("last_line", ""),
        )
    if update is None:
        return False
    detail: dict[str, object] = {
        "exit_code": update.exit_code,
        "signal": fields.get("signal") or None,
        "source": fields.get("source", ""),
    }
    if event.kind == streams.EXIT and event.time:
        detail["exited_at"] = event.time  # when it ended, not when this was recorded
    return await _record(session, job, row, update, detail)


async def _record_checkpoint(session: AsyncSession, event: streams.LearnerEvent) -> None:
    name = event.fields.get("name", "")
    detail: dict[str, object] = {"name": name, "learner": event.learner, "attempt": event.attempt}
    failed = event.fields.get("failed", "")
    if failed:
        # Nothing was committed: not a `checkpoint` event, the newest of which is the one a
        # restart resumes from.
        step = event.fields.get("step", "")
        detail |= {"step": int(step) if step.isdigit() else None, "error": failed}
        reason = f"checkpoint step {step or name} failed: {failed}"
        await repo.add_event(session, event.job, CHECKPOINT_FAILED_EVENT, reason, detail)
    elif event.fields.get("restored") == "1":
        reason = f"learner {event.learner} resumed from checkpoint {name}"
        await repo.add_event(session, event.job, "resumed", reason, detail)
    else:
        reason = f"checkpoint {name} committed"
        await repo.add_event(session, event.job, "checkpoint", reason, detail)


async def apply_cluster_view(
    ctx: Context,
    job_id: str,
    statuses: Sequence[LearnerStatus],
    listed_at: datetime | None = None,
) -> Observation:
    """Bring a job's learner rows in line with the cluster, then settle it on them (whether
    or not anything was new: a step lost or refused before is taken now); returns what
    was seen.

    `listed_at`: when `statuses` were listed. A learner whose row changed since (created
    again, or heard from) may be missing from the list only because the list is older: the
    list says nothing of it, and the next one will.

    Most jobs need nothing on most passes: they are looked at without the row lock first,
    and locked (and looked at again) only when there is something to do, so a sweep of
    many jobs does not hold up the monitor.
    """
    async with ctx.sessions() as session:
        looked = await _look(session, job_id)
        if looked is None:
            return Observation()
        seen, updates = _cluster_news(ctx, looked, statuses, listed_at)
        if not updates and decide(job_view(looked.job, looked.views())).target is None:
            return seen
    async with ctx.sessions.begin() as session:
        locked = await lock(session, job_id)
        if locked is None:
            return Observation()
        seen, updates = _cluster_news(ctx, locked, statuses, listed_at)
        for update in updates:
            row = locked.rows[update.index]
            await _record(session, locked.job, row, update, {"source": "reconcile"})
        decisions = await settle(session, locked)
    await carry_out(ctx, job_id, locked.job.attempt, decisions)
    return seen


def _cluster_news(
    ctx: Context, known: JobRows, statuses: Sequence[LearnerStatus], listed_at: datetime | None
) -> tuple[Observation, list[LearnerView]]:
    """What the cluster shows of the job that its rows do not say yet, and the rows' updates."""
    job, rows = known.job, known.rows
    current = {
        s.learner: s for s in statuses if s.learner in rows and s.attempt == rows[s.learner].attempt
    }
    cluster = [
        ClusterLearner(s.learner, s.finished, s.exit_code, s.signal, s.reason, s.oom_killed)
        for s in current.values()
    ]
    listed = [view for view in known.views() if not _changed_since(rows[view.index], listed_at)]
    seen = observe_cluster(
        job_view(job, listed),
        cluster,
        age=ctx.age(job.updated_at),
        grace=ctx.timings.deploy_grace_s,
        redeploy_after=ctx.timings.redeploy_after_s,
    )
    # Classed as the learner's own exit report classes it (the cluster keeps a copy): the
    # same end decides the same way whichever of the two is read first.
    ended = [
        _after_exit(
            job,
            rows[s.index],
            s.exit_code,
            s.signal,
            s.reason,
            stopped=current[s.index].stopping or current[s.index].told_to_stop,
            oom_killed=s.oom_killed,
            last_line=current[s.index].last_line,
        )
        for s in seen.exits
    ]
    lost = [
        LearnerView(i, LearnerState.FAILED, None, VANISHED, cause=Cause.VANISHED.value)
        for i in seen.vanished
    ]
    return seen, [update for update in ended if update is not None] + lost


def _changed_since(row: Learner, moment: datetime | None) -> bool:
    changed = row.updated_at
    if changed.tzinfo is None:  # SQLite hands back naive datetimes: they are UTC
        changed = changed.replace(tzinfo=UTC)
    return moment is not None and changed > moment


async def settle_job(ctx: Context, job_id: str) -> None:
    """Decide on the job's rows as they stand. A learner that ended while the job was
    RECOVERING or QUEUED was recorded then but not acted on (the next attempt decides): a
    deploy that kept some learners running calls this once the others are created, so that
    end is acted on at once."""
    async with ctx.sessions.begin() as session:
        locked = await lock(session, job_id)
        if locked is None:
            return
        decisions = await settle(session, locked)
    await carry_out(ctx, job_id, locked.job.attempt, decisions)


async def apply_silence(
    ctx: Context, job_id: str, silent: Mapping[int, float], attempts: Mapping[int, int]
) -> None:
    """Learners that stopped sending heartbeats failed: the restart policy takes it from there.

    `attempts`: the attempt each silent learner's row held when its silence was measured; a
    row that moved on since (ended, or created again) is left alone."""
    async with ctx.sessions.begin() as session:
        locked = await lock(session, job_id)
        if locked is None or locked.job.desired != Desired.RUN:
            return
        for index, silence in sorted(silent.items()):
            row = locked.rows.get(index)
            if row is None or row.attempt != attempts.get(index):
                continue
            if LearnerState(row.state) not in LEARNER_BEATING:
                continue
            reason = f"no heartbeat for {silence:.0f} s: the learner hung"
            update = LearnerView(
                index, LearnerState.FAILED, None, reason, cause=Cause.HEARTBEAT.value
            )
            await _record(session, locked.job, row, update, {"source": "heartbeat"})
        decisions = await settle(session, locked)
    await carry_out(ctx, job_id, locked.job.attempt, decisions)
