"""How a job moves, given what its learners report: pure functions over plain dataclasses.

The monitor (learner events), the reconcile (what the cluster shows) and the tests call the
same functions; none of them touches the database, the cluster or a clock.

Learner states and their diagram are in `storage.job_states`.

The job follows its learners: it is DOWNLOADING as soon as one learner fetches, RUNNING when
every learner runs, STORING when every learner stores, COMPLETED when every learner exited 0,
and FAILED when one learner failed. A failure names its learner (`failed_learner`), so the
caller can let `restart_policy.decide_restart` turn it into RECOVERING and a restart.
"""

from __future__ import annotations

import signal as signals
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

from storage.job_states import (
    LEARNER_ENDING,
    LEARNER_FINISHED,
    LEARNER_REPORTED,
    Desired,
    JobState,
    LearnerState,
)

_PROGRESS_RANK = {
    LearnerState.PENDING: 0,
    LearnerState.DOWNLOADING: 1,
    LearnerState.RUNNING: 2,
    LearnerState.STORING: 3,
    LearnerState.DONE: 4,
    LearnerState.SUCCEEDED: 4,
}
_JOB_RANK = {
    JobState.QUEUED: -1,
    JobState.DEPLOYING: 0,
    JobState.RECOVERING: 0,
    JobState.RESCALING: 0,
    JobState.DOWNLOADING: 1,
    JobState.RUNNING: 2,
    JobState.STORING: 3,
}
_JOB_STATE_AT_RANK = {1: JobState.DOWNLOADING, 2: JobState.RUNNING, 3: JobState.STORING}

OOM_EXIT_CODE = 137
HALTED_BY_USER = "halted by user"  # why a halt the user asked for moves its job to HALTED


class Action(StrEnum):
    STOP_LEARNERS = "stop_learners"
    STOP_FAILED_LEARNER = "stop_failed_learner"  # only `Decision.failed_learner`
    RESTART = "restart"  # deploy the next attempt (after `Decision.delay_s`)


@dataclass(frozen=True)
class LearnerView:
    index: int
    state: LearnerState
    exit_code: int | None = None
    reason: str = ""
    signal: str | None = None
    oom_killed: bool | None = None  # the cluster's word on it, where it gives one
    cause: str | None = None  # a failed learner's `restart_policy.Cause`, as reported
    last_line: str = ""  # the program's last line, where its runner reported one


@dataclass(frozen=True)
class JobView:
    state: JobState
    desired: Desired
    learners: Sequence[LearnerView]


@dataclass(frozen=True)
class Decision:
    target: JobState | None = None
    reason: str = ""
    actions: tuple[Action, ...] = ()
    via: tuple[JobState, ...] = ()  # states to pass through first, as the table requires
    failed_learner: int | None = None  # the learner whose failure this decision is about
    delay_s: float = 0.0  # for RESTART: how long to back off first


NO_CHANGE = Decision()


def describe_exit(exit_code: int | None, signal: str | None) -> str:
    """A human reason for a process exit, as the node agent and the reconcile report it."""
    if signal:
        return f"killed by {signal}"
    if exit_code is None:
        return "exit status unknown"
    if exit_code == OOM_EXIT_CODE:
        return f"exit code {exit_code} (likely out of memory)"
    if exit_code > 128 and exit_code - 128 < signals.NSIG:
        return f"exit code {exit_code} (killed by {signals.Signals(exit_code - 128).name})"
    return f"exit code {exit_code}"


def learner_after_exit(
    previous: LearnerState,
    desired: Desired,
    exit_code: int | None,
    signal: str | None,
    reason: str = "",
    *,
    stopped: bool = False,
) -> tuple[LearnerState, str]:
    """The final state of a learner whose process ended, and why.

    `stopped`: the cluster says it ended the learner on the lifecycle manager's request.
    """
    why = reason or describe_exit(exit_code, signal)
    if stopped or desired is not Desired.RUN or previous is LearnerState.STOPPING:
        return LearnerState.STOPPED, why
    if exit_code == 0 and not signal:
        return LearnerState.SUCCEEDED, "exit code 0"
    return LearnerState.FAILED, why


def learner_after_status(previous: LearnerState, reported: LearnerState) -> LearnerState | None:
    """The new learner state for a status report, or None to ignore it (stale, or final)."""
    if previous in LEARNER_ENDING or reported not in LEARNER_REPORTED:
        return None
    if _PROGRESS_RANK[reported] <= _PROGRESS_RANK[previous]:
        return None
    return reported


def decide(job: JobView) -> Decision:
    """The state a job should move to, and what to do, given its learners."""
    if job.state in (
        JobState.COMPLETED,
        JobState.FAILED,
        JobState.HALTED,
        JobState.QUEUED,
        JobState.RECOVERING,  # the old attempt's learners are going; the next one decides
    ):
        return NO_CHANGE
    if job.desired is Desired.DELETE:
        return NO_CHANGE
    learners = job.learners
    if job.desired is Desired.HALT:
        if all(learner.state in LEARNER_FINISHED for learner in learners):
            # Learners that ended before the halt stopped them leave the job's other
            # objects (its Secret, its Service) for this step to remove.
            return Decision(JobState.HALTED, HALTED_BY_USER, (Action.STOP_LEARNERS,))
        return NO_CHANGE
    if any(learner.state in (LearnerState.STOPPING, LearnerState.STOPPED) for learner in learners):
        return NO_CHANGE  # a halt the user took back: resuming finishes it, then redeploys
    failed = [learner for learner in learners if learner.state is LearnerState.FAILED]
    if failed:
        first = failed[0]
        reason = f"learner {first.index} failed: {first.reason or 'unknown cause'}"
        return Decision(
            JobState.FAILED, reason, (Action.STOP_LEARNERS,), failed_learner=first.index
        )
    if learners and all(learner.state is LearnerState.SUCCEEDED for learner in learners):
        count = len(learners)
        noun = "learner" if count == 1 else "learners"
        # Learners may finish before their progress was seen; the job still passes RUNNING.
        via = () if job.state in (JobState.RUNNING, JobState.STORING) else (JobState.RUNNING,)
        reason = f"training finished: {count} {noun} exited 0"
        return Decision(JobState.COMPLETED, reason, (Action.STOP_LEARNERS,), via)
    return _progress(job)


def _progress(job: JobView) -> Decision:
    current = _JOB_RANK.get(job.state)
    if current is None or not job.learners:
        return NO_CHANGE
    ranks = [_PROGRESS_RANK.get(learner.state, 0) for learner in job.learners]
    target_rank = min(max(min(ranks), 1 if max(ranks) >= 1 else 0), 3)
    if target_rank <= current:
        return NO_CHANGE
    target = _JOB_STATE_AT_RANK[target_rank]
    return Decision(target, _progress_reason(target, len(job.learners)))


def _progress_reason(target: JobState, count: int) -> str:
    if target is JobState.DOWNLOADING:
        return "learners are fetching the model and data"
    if target is JobState.RUNNING:
        return "training" if count == 1 else f"training on {count} learners"
    return "storing results"


@dataclass(frozen=True)
class ClusterLearner:
    """What the cluster shows of one learner of the job's current attempt."""

    index: int
    finished: bool
    exit_code: int | None = None
    signal: str | None = None
    reason: str = ""
    oom_killed: bool | None = None


@dataclass(frozen=True)
class Observation:
    """What the cluster shows that no event reported (for the reconcile)."""

    exits: tuple[ClusterLearner, ...] = ()  # finished learners whose rows are still active
    vanished: tuple[int, ...] = ()  # learners the cluster lost
    not_created: tuple[int, ...] = ()  # learners of a deploying job still to be created


def observe_cluster(
    job: JobView,
    cluster: Sequence[ClusterLearner],
    *,
    age: float,
    grace: float,
    redeploy_after: float | None = None,
) -> Observation:
    """Compare a running job's learner rows with the cluster.

    A learner that never reported is given `grace` seconds from the job's last change (`age`)
    to appear, since it may be being created right now; after that a later job has lost it.
    A deploying job whose learners are missing is deployed again after `redeploy_after`
    seconds (default `grace`): creation is idempotent, so a deploy that races one still under
    way costs nothing, while one whose worker died is not left waiting.
    """
    if job.desired is not Desired.RUN or job.state in (JobState.QUEUED, JobState.HALTED):
        return Observation()
    if job.state not in _JOB_RANK:
        return Observation()
    present = {learner.index: learner for learner in cluster}
    exits: list[ClusterLearner] = []
    vanished: list[int] = []
    not_created: list[int] = []
    for row in job.learners:
        if row.state in LEARNER_ENDING:
            continue
        seen = present.get(row.index)
        if seen is not None:
            if seen.finished:
                exits.append(seen)
        elif row.state is not LearnerState.PENDING:
            vanished.append(row.index)
        elif job.state is JobState.DEPLOYING:
            if age >= (grace if redeploy_after is None else redeploy_after):
                not_created.append(row.index)
        elif age >= grace:
            vanished.append(row.index)
    return Observation(tuple(exits), tuple(vanished), tuple(not_created))
