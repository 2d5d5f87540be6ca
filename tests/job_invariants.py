"""What must hold of every job once the platform is quiet, whatever the timing: pure checks
over a job's events and rows, shared by the convergence tests, the burst test and
`bench/soak.py` (which read the same facts from the database or from the API).

- the state events form one chain from QUEUED: each leaves the state the one before entered,
  by a move the transition table allows, so no transition is recorded twice and none is
  skipped; and no halt the user took back halts an attempt deployed since;
- each learner attempt's exit is recorded once;
- restarts that used the policy's `max_restarts` are no more than it allows, and the job's
  `restarts` counter says how many there were; where the reader knows the job's whole
  restart policy, each restart and each refusal is the one the policy decides on the
  failure it records and the restarts before it;
- the job is in a stopped state (final, or HALTED as its user asked) and that state agrees
  with its learners: COMPLETED only when every learner of its last attempt exited 0.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any

from lifecycle_manager.decisions.job_progress import HALTED_BY_USER
from lifecycle_manager.decisions.restart_policy import Failure, RestartPolicy, decide_restart
from storage.job_states import STOPPED_STATES, JobState, can_transition

INTERRUPTED = "interrupted"


@dataclass(frozen=True)
class EventFacts:
    kind: str
    from_state: str | None = None
    to_state: str | None = None
    detail: Mapping[str, Any] = field(default_factory=dict)
    reason: str = ""

    @classmethod
    def of(cls, event: Any) -> EventFacts:
        """From a `JobEvent` row or the API's JSON of one."""
        if isinstance(event, Mapping):
            return cls(
                event["kind"],
                event.get("from_state"),
                event.get("to_state"),
                event["detail"],
                event.get("reason", ""),
            )
        return cls(
            event.kind, event.from_state, event.to_state, dict(event.detail or {}), event.reason
        )

    def __str__(self) -> str:
        move = f" {self.from_state} -> {self.to_state}" if self.to_state else ""
        return f"{self.kind}{move}: {self.reason}"


def story(events: Sequence[EventFacts]) -> str:
    """A job's events, one a line, for a failing check's message."""
    return "\n".join(f"  {event}" for event in events)


def event_problems(events: Sequence[EventFacts]) -> list[str]:
    """What is wrong with a job's events, oldest first; empty when nothing is."""
    problems: list[str] = []
    state: str | None = None
    for number, event in enumerate(events):
        if event.kind == "submitted":
            if number != 0 or event.to_state != JobState.QUEUED:
                problems.append(f"event {number}: submitted is not the first event into QUEUED")
            state = event.to_state
        elif event.kind == "state":
            if event.from_state != state:
                problems.append(
                    f"event {number}: {event.from_state} -> {event.to_state} recorded while "
                    f"the job was {state}"
                )
            elif (
                state is None
                or event.to_state is None
                or not can_transition(JobState(state), JobState(event.to_state))
            ):
                problems.append(f"event {number}: {state} -> {event.to_state} is not allowed")
            state = event.to_state
    for (learner, attempt), count in sorted(_exits(events).items()):
        if count > 1:
            problems.append(f"learner {learner} of attempt {attempt} exited {count} times")
    return problems + _halts_taken_back(events)


def _halts_taken_back(events: Sequence[EventFacts]) -> list[str]:
    """Moves to HALTED, by a halt its user took back, of an attempt deployed since: that
    halt stopped learners it did not mean. (A halt taken back may still end the attempt it
    was stopping: a resume that overtakes its halt finishes it, then deploys.)"""
    problems = []
    halting = redeployed = False
    for number, event in enumerate(events):
        if event.kind in ("halt_requested", "resume_requested"):
            halting, redeployed = event.kind == "halt_requested", False
        elif event.kind == "state" and event.to_state == JobState.DEPLOYING:
            redeployed = not halting
        elif (
            event.kind == "state"
            and event.to_state == JobState.HALTED
            and event.reason == HALTED_BY_USER
            and redeployed
        ):
            problems.append(
                f"event {number}: {event.from_state} -> HALTED by a halt taken back, in an "
                "attempt deployed since"
            )
    return problems


def _exits(events: Sequence[EventFacts]) -> Counter[tuple[int, int]]:
    """How often each (learner, attempt) had its exit recorded."""
    return Counter(
        (int(event.detail["learner"]), int(event.detail["attempt"]))
        for event in events
        if event.kind == "learner_exit"
    )


def duplicate_events(events: Sequence[EventFacts]) -> int:
    """Events that record again what an earlier one did: a learner attempt's exit recorded
    more than once, or a transition recorded twice in a row."""
    exits = sum(count - 1 for count in _exits(events).values())
    moves = [(e.from_state, e.to_state) for e in events if e.kind in ("submitted", "state")]
    repeated = sum(1 for before, after in pairwise(moves) if before == after)
    return exits + repeated


def counted_restarts(events: Sequence[EventFacts]) -> int:
    """Restarts that used one of the policy's `max_restarts` (interruptions use none)."""
    return sum(
        1
        for event in events
        if event.kind == "restart" and event.detail.get("failure", {}).get("cause") != INTERRUPTED
    )


@dataclass(frozen=True)
class JobFacts:
    """A job as it stands: its row's state and counters, its learner rows, its events."""

    state: str
    restarts: int
    max_restarts: int
    learner_states: Mapping[int, str]  # learner -> its row's state (empty once purged)
    events: Sequence[EventFacts]
    restart_policy: RestartPolicy | None = None  # from the manifest, where the reader has it


def verdict_problems(events: Sequence[EventFacts], policy: RestartPolicy) -> list[str]:
    """Restarts and refusals the policy would have decided otherwise, given the failure each
    records and the restarts recorded before it."""
    problems: list[str] = []
    history: list[Failure] = []
    for number, event in enumerate(events):
        if event.kind not in ("restart", "restart_refused"):
            continue
        failure = Failure.from_detail(event.detail.get("failure", {}))
        verdict = decide_restart(policy, failure, history)
        if verdict.restart != (event.kind == "restart"):
            says = "a restart" if verdict.restart else "a refusal"
            problems.append(
                f"event {number}: {event.kind} of learner {failure.learner}'s {failure.cause} "
                f"failure, where the policy decides {says}: {verdict.reason}"
            )
        if event.kind == "restart":
            history.append(failure)
    return problems


def settled_problems(job: JobFacts) -> list[str]:
    """What is wrong with a job the platform has had time to settle; empty when nothing."""
    problems = event_problems(job.events)
    chain = [e.to_state for e in job.events if e.kind in ("submitted", "state")]
    if chain and chain[-1] != job.state:
        problems.append(f"the job is {job.state} but its last state event says {chain[-1]}")
    if JobState(job.state) not in STOPPED_STATES:
        problems.append(f"left between: {job.state}")
    restarts = counted_restarts(job.events)
    if restarts != job.restarts:
        problems.append(f"restarts says {job.restarts}, its events {restarts}")
    if restarts > job.max_restarts:
        problems.append(f"{restarts} restarts under max_restarts {job.max_restarts}")
    if job.restart_policy is not None:
        problems += verdict_problems(job.events, job.restart_policy)
    learners = set(job.learner_states.values())
    if job.state == JobState.COMPLETED and learners != {"SUCCEEDED"}:
        problems.append(f"COMPLETED with learners {dict(job.learner_states)}")
    if job.state == JobState.FAILED and learners and "FAILED" not in learners:
        problems.append(f"FAILED with no failed learner: {dict(job.learner_states)}")
    if job.state == JobState.HALTED and learners - {"STOPPED", "SUCCEEDED", "FAILED"}:
        problems.append(f"HALTED with learners still going: {dict(job.learner_states)}")
    return problems
