"""Whether a failed job restarts from its newest checkpoint: pure functions over plain data.

```
 learner failed
      |
      +-- interrupted (stopped by the platform while the job should run)? --yes--+
      |                                                                          |
      +-- exit code in fail_on_exit_codes? --yes--> FAILED at once               |
      |                                                                          |
      +-- no restarts left? --yes--> FAILED "restarts exhausted"                 |
      |                                                                          |
      +-- the program's own error repeating? --yes--> FAILED "the same failure   |
      |   (same exit code and last line, no new checkpoint between)  repeated"   |
      v                                                                          |
 RECOVERING <--------------------------------------------------------------------+
      |  after the backoff
      v
 DEPLOYING the next attempt (its runners restore the newest committed checkpoint)
```

The policy's `scope` says what a restart re-creates: `gang` (the default, for
torch.distributed jobs whose learners cannot go on without each other) stops every learner
and deploys them all again from the gang's checkpoint; `learner` (independent learners)
stops and re-creates only the failed learner, from its own newest checkpoint, while the
others keep running. Counting, backoff and the identical-failure check are per job either way.

A program that exits with a code listed in `fail_on_exit_codes` said it cannot go on (a bad
argument, missing data): the job fails at once, whatever restarts are left. Signals,
out-of-memory kills, missing heartbeats and vanished learners come from the
machine, not from the program, so they never count as a repeating program error. An
interruption (the platform or the cluster stopped a learner the job still wants: `dlaas
down`, a node drained) is no failure at all: the job resumes without using a restart. The
backoff grows only over consecutive failures that made no progress (no new checkpoint):
a job that keeps checkpointing between failures restarts at once every time.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any

from lifecycle_manager.decisions.job_progress import OOM_EXIT_CODE, Action, Decision
from storage.job_states import JobState


class Cause(StrEnum):
    EXIT = "exit"  # the program exited non-zero by itself
    SIGNAL = "signal"  # killed by a signal
    OOM = "oom"  # killed for memory
    HEARTBEAT = "heartbeat"  # silent for too long: hung
    VANISHED = "vanished"  # the cluster lost it
    INTERRUPTED = "interrupted"  # stopped on a request that was not the lifecycle manager's


class RestartScope(StrEnum):
    GANG = "gang"  # a failure restarts every learner (torch.distributed)
    LEARNER = "learner"  # a failure restarts only the failed learner (independent learners)


@dataclass(frozen=True)
class RestartPolicy:
    max_restarts: int = 3
    backoff_s: float = 1.0
    backoff_max_s: float = 60.0
    identical_failures: int = 2
    heartbeat_timeout_s: float = 30.0
    scope: RestartScope = RestartScope.GANG
    fail_on_exit_codes: frozenset[int] = frozenset()

    @classmethod
    def from_manifest(cls, manifest: Mapping[str, Any]) -> RestartPolicy:
        block = manifest.get("restart_policy")
        if not isinstance(block, Mapping):
            return cls()
        known = {k: block[k] for k in cls.__dataclass_fields__ if k in block}
        if "scope" in known:
            known["scope"] = RestartScope(known["scope"])
        if "fail_on_exit_codes" in known:
            known["fail_on_exit_codes"] = frozenset(int(c) for c in known["fail_on_exit_codes"])
        return cls(**known)


# What differs between two attempts of the same program error: where the attempt ran, and
# what the process was given at random. Each pattern is replaced by a mark of its own.
_ATTEMPT_DETAILS = (
    # a learner's working directory per attempt: .../jobs/J/learner-1/a2/data/x.npz
    (re.compile(r"(?<=/learner-)(\d+)/a\d+(?=/|\b)"), r"\1/a*"),
    # a learner's name (process, pod): dlaas-J-learner-1-a2
    (re.compile(r"(?<=-learner-)(\d+)-a\d+\b"), r"\1-a*"),
    # object addresses: <Tensor object at 0x7f3a2c1d0e50>
    (re.compile(r"\b0x[0-9a-fA-F]{6,}\b"), "0x*"),
    # process ids: "pid 4711", "PID: 4711", "process 4711"
    (re.compile(r"\b(pid|PID|process|Process)([ =:]+)\d+\b"), r"\1\2*"),
    # temporary files and directories: /tmp/tmpk3j_x9q1
    (re.compile(r"\btmp[a-z0-9_]{8}\b"), "tmp*"),
    # times of day, as logging prefixes them: 2026-11-24 12:00:03,123
    (re.compile(r"\b\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:[.,]\d+)?"), "<time>"),
)


def without_attempt_details(line: str) -> str:
    """A program's error line with what differs between attempts masked, so the same error
    in two attempts (a missing file under each attempt's own directory) compares equal."""
    for pattern, mark in _ATTEMPT_DETAILS:
        line = pattern.sub(mark, line)
    return line


def learners_to_restart(
    scope: RestartScope, failed_learner: int | None, num_learners: int
) -> tuple[int, ...]:
    """The learners a restart stops and re-creates: the whole gang, or the failed one."""
    if scope is RestartScope.LEARNER and failed_learner is not None:
        return (failed_learner,)
    return tuple(range(1, num_learners + 1))


@dataclass(frozen=True)
class Failure:
    """One learner failure, as recorded in the job's restart history."""

    learner: int
    cause: Cause
    reason: str
    exit_code: int | None = None
    last_line: str = ""
    checkpoint: str | None = None  # the newest committed checkpoint when it failed
    signal: str | None = None  # the signal that ended it, if one did

    @property
    def signature(self) -> str:
        return f"{self.cause}|{self.exit_code}|{without_attempt_details(self.last_line)}"

    def repeats(self, earlier: Failure) -> bool:
        """The same program error again, with no progress in between."""
        return (
            self.cause is Cause.EXIT
            and earlier.signature == self.signature
            and earlier.checkpoint == self.checkpoint
        )

    def to_detail(self) -> dict[str, Any]:
        return {
            "learner": self.learner,
            "cause": self.cause.value,
            "reason": self.reason,
            "exit_code": self.exit_code,
            "last_line": self.last_line,
            "checkpoint": self.checkpoint,
            "signal": self.signal,
        }

    @classmethod
    def from_detail(cls, detail: Mapping[str, Any]) -> Failure:
        return cls(
            learner=int(detail.get("learner", 0)),
            cause=Cause(detail.get("cause", Cause.EXIT.value)),
            reason=str(detail.get("reason", "")),
            exit_code=detail.get("exit_code"),
            last_line=str(detail.get("last_line", "")),
            checkpoint=detail.get("checkpoint"),
            signal=detail.get("signal"),
        )


@dataclass(frozen=True)
class RestartVerdict:
    restart: bool
    reason: str
    delay_s: float = 0.0


def classify(
    exit_code: int | None,
    signal: str | None,
    *,
    vanished: bool = False,
    oom_killed: bool | None = None,
) -> Cause:
    """The cause of a learner's end.

    `oom_killed`: what the cluster says (Kubernetes' container reason `OOMKilled`), or None
    where it says nothing (the local backend): then an exit 137 with no signal recorded is
    taken for the likely out-of-memory kill it usually is.
    """
    if oom_killed:
        return Cause.OOM
    # A program that ends by itself has an exit code; none, and no signal, means the
    # cluster lost the learner (it ended while its node agent was down).
    if vanished or (exit_code is None and not signal):
        return Cause.VANISHED
    if oom_killed is None and exit_code == OOM_EXIT_CODE and not signal:
        return Cause.OOM
    if signal or (exit_code is not None and exit_code > 128):
        return Cause.SIGNAL
    return Cause.EXIT


def _stalled(failure: Failure, history: Sequence[Failure]) -> int:
    """How many failures in a row, ending with `failure`, made no checkpoint progress."""
    count = 1
    for earlier in reversed(history):
        if earlier.checkpoint != failure.checkpoint:
            break
        count += 1
    return count


def decide_restart(
    policy: RestartPolicy, failure: Failure, history: Sequence[Failure]
) -> RestartVerdict:
    """Restart or give up, given this failure and the ones before it (oldest first)."""
    if failure.cause is not Cause.INTERRUPTED and failure.exit_code in policy.fail_on_exit_codes:
        return RestartVerdict(
            False,
            f"{failure.reason}; exit code {failure.exit_code} is one of "
            "restart_policy.fail_on_exit_codes, so the job fails without a restart",
        )
    used = sum(1 for earlier in history if earlier.cause is not Cause.INTERRUPTED)
    if failure.cause is not Cause.INTERRUPTED and used >= policy.max_restarts:
        return RestartVerdict(
            False,
            f"{failure.reason}; no restarts left ({used} of {policy.max_restarts} used)",
        )
    repeated = 1
    for earlier in reversed(history):
        if not failure.repeats(earlier):
            break
        repeated += 1
    if repeated >= policy.identical_failures:
        return RestartVerdict(
            False,
            f"{failure.reason}; the same failure happened {repeated} times in a row with no "
            "new checkpoint, so it is the program's own error: fix it and submit again",
        )
    stalled = _stalled(failure, history)
    delay = (
        0.0 if stalled <= 1 else min(policy.backoff_s * 2 ** (stalled - 2), policy.backoff_max_s)
    )
    resume = f"from {failure.checkpoint}" if failure.checkpoint else "from the start"
    if failure.cause is Cause.INTERRUPTED:
        return RestartVerdict(
            True, f"{failure.reason}; resuming {resume} (an interruption uses no restart)", delay
        )
    return RestartVerdict(
        True,
        f"{failure.reason}; restart {used + 1} of {policy.max_restarts} {resume}",
        delay,
    )


def with_restart_policy(
    decision: Decision, policy: RestartPolicy, failure: Failure, history: Sequence[Failure]
) -> tuple[Decision, RestartVerdict]:
    """Turn a learner failure's FAILED decision into RECOVERING when the policy allows:
    stopping the gang, or (scope `learner`) only the failed learner, then the restart."""
    verdict = decide_restart(policy, failure, history)
    if not verdict.restart:
        return replace(decision, reason=verdict.reason), verdict
    stop = Action.STOP_LEARNERS if policy.scope is RestartScope.GANG else Action.STOP_FAILED_LEARNER
    restarting = Decision(
        JobState.RECOVERING,
        verdict.reason,
        (stop, Action.RESTART),
        failed_learner=decision.failed_learner,
        delay_s=verdict.delay_s,
    )
    return restarting, verdict
