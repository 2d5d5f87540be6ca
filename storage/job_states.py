"""The states of a job and of its learners: the job's transition table, pure functions over
it, and the learner states every package names (the API, the lifecycle manager, the
database's rows and the learner's status reports all use these values).

```
            +---------+   deploy    +-----------+  learners fetch  +-------------+
 submit --> | QUEUED  | ----------> | DEPLOYING | ---------------> | DOWNLOADING |
            +---------+             +-----------+                  +-------------+
              ^   |                       |                               |
       resume |   | halt                  +--------------+----------------+
              |   v                                      v
            +---------+     halt      +---------+  exit 0 on all  +---------+     +-----------+
            | HALTED  | <------------ | RUNNING | --------------> | STORING | --> | COMPLETED |
            +---------+               +---------+                 +---------+     +-----------+
                                       |  ^   |
                    learner died       |  |   | resize
                    (restarts left)    v  |   v
                                 +------------+  +-----------+
                                 | RECOVERING |  | RESCALING |
                                 +------------+  +-----------+
   any non-final state --(unrecoverable error / restarts exhausted)--> FAILED
   any state but DELETED --(the user deletes the job)--> DELETED
```

DEPLOYING goes back to QUEUED when gang admission refuses: the cluster cannot hold all of
the job's learners at once, so none is created and the job waits, with the reason, until
a later deploy finds room (a partial gang would hold resources it cannot use).
Any active state goes back to QUEUED when the scheduler preempts the job: its learners were
asked to checkpoint and stop, and it resumes from that checkpoint when admitted again
(a preemption is not a restart: it uses none of the job's restarts).

COMPLETED, FAILED and DELETED are final: nothing more happens to such a job by itself.
A finished job may still be deleted, so COMPLETED and FAILED lead to DELETED; DELETED
leads nowhere. HALTED is not final (the user may resume it), but nothing runs: a follower
of the job's logs stops there too (`STOPPED_STATES`).

The lifecycle manager applies a transition with a conditional update
(`WHERE state IN predecessors(target)`), so two workers racing on the same job cannot
both win; the loser reads the job again and decides anew.

Learner rows move like this (one row per learner, reset whenever that learner is created
again: for every attempt of a gang, or alone when a `restart_policy.scope: learner` job
restarts just that learner; a row's `attempt` is the attempt its learner was created in):

```
 PENDING --> DOWNLOADING --> RUNNING --> STORING --(exit 0)--> SUCCEEDED
    |             |             |           |
    +-------------+---(exit != 0, vanished)-+------------------> FAILED
    +-------------+---(halt: being stopped)-+--> STOPPING --(exit)--> STOPPED
```

A learner that exits after the lifecycle manager stopped it (halt, delete) is STOPPED, never
FAILED. STOPPING rows mark an attempt being halted: if the user resumes before the halt is
through, the resume finishes the halt first and then deploys a new attempt. How a job
follows its learners is decided in `lifecycle_manager.decisions.job_progress`.
"""

from __future__ import annotations

from enum import StrEnum


class JobState(StrEnum):
    QUEUED = "QUEUED"
    DEPLOYING = "DEPLOYING"
    DOWNLOADING = "DOWNLOADING"
    RUNNING = "RUNNING"
    STORING = "STORING"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"
    HALTED = "HALTED"
    RECOVERING = "RECOVERING"
    RESCALING = "RESCALING"
    DELETED = "DELETED"


class Desired(StrEnum):
    """What the user asked of a job; the lifecycle manager drives the cluster towards it."""

    RUN = "run"
    HALT = "halt"
    DELETE = "delete"


S = JobState

_TABLE: dict[JobState, frozenset[JobState]] = {
    S.QUEUED: frozenset({S.DEPLOYING, S.HALTED, S.FAILED}),
    S.DEPLOYING: frozenset(
        {S.DOWNLOADING, S.RUNNING, S.STORING, S.RECOVERING, S.QUEUED, S.HALTED, S.FAILED}
    ),
    S.DOWNLOADING: frozenset({S.RUNNING, S.STORING, S.RECOVERING, S.QUEUED, S.HALTED, S.FAILED}),
    S.RUNNING: frozenset(
        {S.STORING, S.COMPLETED, S.RECOVERING, S.RESCALING, S.QUEUED, S.HALTED, S.FAILED}
    ),
    S.STORING: frozenset({S.COMPLETED, S.RECOVERING, S.QUEUED, S.HALTED, S.FAILED}),
    S.RECOVERING: frozenset({S.DEPLOYING, S.DOWNLOADING, S.RUNNING, S.QUEUED, S.HALTED, S.FAILED}),
    S.RESCALING: frozenset({S.DEPLOYING, S.RUNNING, S.RECOVERING, S.QUEUED, S.HALTED, S.FAILED}),
    S.HALTED: frozenset({S.QUEUED, S.FAILED}),
    S.COMPLETED: frozenset(),
    S.FAILED: frozenset(),
}
# The user may delete a job at any time, whatever it is doing.
TRANSITIONS: dict[JobState, frozenset[JobState]] = {
    **{state: targets | {S.DELETED} for state, targets in _TABLE.items()},
    S.DELETED: frozenset(),
}

FINAL_STATES = frozenset({S.COMPLETED, S.FAILED, S.DELETED})
# States in which the job does no more work unless the user asks: a follower of it ends there.
STOPPED_STATES = FINAL_STATES | {S.HALTED}
ACTIVE_STATES = frozenset(
    {S.DEPLOYING, S.DOWNLOADING, S.RUNNING, S.STORING, S.RECOVERING, S.RESCALING}
)


class IllegalTransition(ValueError):
    def __init__(self, current: JobState, target: JobState) -> None:
        super().__init__(f"a job cannot go from {current} to {target}")
        self.current = current
        self.target = target


def can_transition(current: JobState, target: JobState) -> bool:
    return target in TRANSITIONS[current]


def check_transition(current: JobState, target: JobState) -> None:
    if not can_transition(current, target):
        raise IllegalTransition(current, target)


def predecessors(target: JobState) -> frozenset[JobState]:
    """The states from which `target` may be entered."""
    return frozenset(s for s, targets in TRANSITIONS.items() if target in targets)


def is_final(state: JobState) -> bool:
    return state in FINAL_STATES


class LearnerState(StrEnum):
    PENDING = "PENDING"
    DOWNLOADING = "DOWNLOADING"
    RUNNING = "RUNNING"
    STORING = "STORING"
    DONE = "DONE"  # the runner said it finished; its exit is still to come
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    STOPPING = "STOPPING"  # being stopped by the lifecycle manager (halt)
    STOPPED = "STOPPED"  # stopped by the lifecycle manager (halt, delete)


L = LearnerState

LEARNER_FINISHED = frozenset({L.SUCCEEDED, L.FAILED, L.STOPPED})
LEARNER_ENDING = LEARNER_FINISHED | {L.STOPPING}
# Learners whose runner sends heartbeats: silent too long, they hung.
LEARNER_BEATING = frozenset({L.DOWNLOADING, L.RUNNING, L.STORING})
# The states a learner's runner reports of itself (its `status` events); the others are the
# lifecycle manager's word.
LEARNER_REPORTED = frozenset({L.DOWNLOADING, L.RUNNING, L.STORING, L.DONE})
