"""A cluster backend whose learners do only what a test tells them, for model-based tests.

It has the node agent's shape (`lifecycle_manager.backends.local`): learners are created
running, listed until deleted (finished ones too), stopped by a delete that takes effect
when the test lets the stopping learner exit, and every end is reported twice on the
learner-event stream, by the learner's runner (with the program's last line, `stopped=1`
when it was told to stop) and by the agent (`deleted=1` when it was deleting it, and what
the runner's exit report, which it keeps with the learner, says).

What a real agent cannot be made to do on cue is the point: a learner ends, fails, hangs
or vanishes (gone with no report) exactly between two steps the test chose; its reports
wait in an outbox until the test delivers them, late, ahead of other learners' reports,
more than once, or never;
and the whole cluster can be unreachable, or full. `yields` lets the test interleave concurrent
callers at the backend's awaits.
"""

from __future__ import annotations

import asyncio
import dataclasses
import random
from collections.abc import Sequence
from dataclasses import dataclass, field

from lifecycle_manager.backends.base import (
    BackendUnavailable,
    LearnerPhase,
    LearnerSpec,
    LearnerStatus,
    NoCapacity,
    learner_name,
)
from lifecycle_manager.decisions.job_progress import describe_exit
from storage import streams
from storage.cluster_nodes import NodeCapacity
from storage.exit_reports import ExitReport

# The simulated cluster's one node, as the node agent's would be described.
SIMULATED_NODE = NodeCapacity("simulated", millicpus=64_000, memory=256 * 2**30)

PROGRESS = ("DOWNLOADING", "RUNNING", "STORING", "DONE")


@dataclass
class SimulatedLearner:
    job_id: str
    learner: int
    attempt: int
    phase: LearnerPhase = LearnerPhase.RUNNING
    exit_code: int | None = None
    reported: int = 0  # how many of PROGRESS its runner has reported
    deleting: bool = False
    exit_report: ExitReport | None = None  # what its runner left behind, if it could

    @property
    def name(self) -> str:
        return learner_name(self.job_id, self.learner, self.attempt)

    @property
    def finished(self) -> bool:
        return self.phase in (LearnerPhase.SUCCEEDED, LearnerPhase.FAILED)

    def status(self) -> LearnerStatus:
        return LearnerStatus(
            job_id=self.job_id,
            learner=self.learner,
            attempt=self.attempt,
            name=self.name,
            phase=self.phase,
            exit_code=self.exit_code,
            reason=describe_exit(self.exit_code, None) if self.finished else "",
            stopping=self.deleting,
            told_to_stop=self.exit_report is not None and self.exit_report.stopped,
            last_line=self.exit_report.last_line if self.exit_report else "",
        )


@dataclass
class SimulatedCluster:
    rng: random.Random = field(default_factory=random.Random)
    available: bool = True
    full: bool = False  # no room for another gang: deploys wait QUEUED
    learners: dict[str, SimulatedLearner] = field(default_factory=dict)
    outbox: list[streams.LearnerEvent] = field(default_factory=list)  # reports not yet sent
    sent: list[streams.LearnerEvent] = field(default_factory=list)
    created: int = 0  # learner processes started, all told
    node_list: list[NodeCapacity] = field(default_factory=lambda: [SIMULATED_NODE])

    # -- what the test does --------------------------------------------------------------

    def live(self) -> list[SimulatedLearner]:
        """Learners whose program still runs and that nobody is stopping."""
        return [s for s in self.learners.values() if not s.finished and not s.deleting]

    def stopping(self) -> list[SimulatedLearner]:
        return [s for s in self.learners.values() if s.deleting]

    def progress(self, learner: SimulatedLearner) -> None:
        """Its runner reports the next state it reached."""
        if learner.reported < len(PROGRESS):
            state = PROGRESS[learner.reported]
            learner.reported += 1
            self.outbox.append(
                streams.status_event(learner.job_id, learner.learner, learner.attempt, state)
            )

    def end(self, learner: SimulatedLearner, exit_code: int, *, runner_reports: bool) -> None:
        """Its program exits with `exit_code`; its runner reports it, or dies with it (then
        only the agent reports the exit, and the cluster keeps no exit report)."""
        if runner_reports:
            line = "done" if exit_code == 0 else f"error {exit_code} in train.py"
            self._report_runner_exit(learner, exit_code, line, stopped=False)
        self._exit(learner, exit_code)

    def interrupt(self, learner: SimulatedLearner) -> None:
        """Stopped by someone other than the lifecycle manager (`dlaas down`, a drained
        node): its runner was told to stop and says so."""
        self._report_runner_exit(learner, 143, "", stopped=True)
        self._exit(learner, 143)

    def checkpoint(self, learner: SimulatedLearner, name: str) -> None:
        """Its runner committed a checkpoint and says so."""
        self.outbox.append(
            streams.checkpoint_event(learner.job_id, learner.learner, learner.attempt, name)
        )

    def vanish(self, learner: SimulatedLearner) -> None:
        """Gone with its node: no report, and no longer listed."""
        del self.learners[learner.name]

    def stop(self, learner: SimulatedLearner) -> None:
        """A learner being deleted ends on its SIGTERM: both reports, then it is forgotten."""
        self._report_runner_exit(learner, 143, "", stopped=True)
        self._exit(learner, 143)
        self.learners.pop(learner.name, None)

    def next_reports(self) -> list[int]:
        """Where in the outbox each learner's oldest report is: one learner's reports
        arrive in the order it sent them (its runner reports before it exits, the agent
        after), while different learners' may overtake each other."""
        heads: dict[tuple[str, int, int], int] = {}
        for index, event in enumerate(self.outbox):
            heads.setdefault((event.job, event.learner, event.attempt), index)
        return sorted(heads.values())

    def deliver(self, index: int) -> streams.LearnerEvent:
        event = self.outbox.pop(index)
        self.sent.append(event)
        return event

    def _report_runner_exit(
        self, learner: SimulatedLearner, exit_code: int, last_line: str, *, stopped: bool
    ) -> None:
        """The runner leaves its exit report with the learner and sends it as an event."""
        report = ExitReport(exit_code, None, "", stopped=stopped, last_line=last_line)
        learner.exit_report = report
        event = streams.exit_event(
            learner.job_id, learner.learner, learner.attempt, exit_code, None, ""
        )
        fields = {**event.fields, "source": "command", "last_line": last_line}
        fields["stopped"] = "1" if stopped else "0"
        self.outbox.append(dataclasses.replace(event, fields=fields))

    def _exit(self, learner: SimulatedLearner, exit_code: int) -> None:
        """The process ended: the agent reports it, with what the exit report says."""
        learner.exit_code = exit_code
        learner.phase = LearnerPhase.SUCCEEDED if exit_code == 0 else LearnerPhase.FAILED
        event = streams.exit_event(
            learner.job_id,
            learner.learner,
            learner.attempt,
            exit_code,
            None,
            describe_exit(exit_code, None),
        )
        report = learner.exit_report
        fields = {
            **event.fields,
            "source": "agent",
            "deleted": "1" if learner.deleting else "0",
            "stopped": "1" if report is not None and report.stopped else "0",
            "last_line": report.last_line if report is not None else "",
        }
        self.outbox.append(dataclasses.replace(event, fields=fields))

    # -- the backend, as the lifecycle manager sees it -------------------------------------

    async def _call(self) -> None:
        for _ in range(self.rng.randrange(3)):
            await asyncio.sleep(0)
        if not self.available:
            raise BackendUnavailable("the simulated cluster is unreachable")

    async def create_learners(self, specs: Sequence[LearnerSpec]) -> list[str]:
        await self._call()
        if self.full and any(spec.name not in self.learners for spec in specs):
            raise NoCapacity("the simulated cluster is full")
        created = []
        for spec in specs:
            if spec.name not in self.learners:
                self.learners[spec.name] = SimulatedLearner(spec.job_id, spec.learner, spec.attempt)
                self.created += 1
                created.append(spec.name)
        return created

    async def nodes(self) -> list[NodeCapacity]:
        await self._call()
        return list(self.node_list)

    async def delete_learners(
        self,
        job_id: str,
        *,
        wait: float = 0.0,
        grace: float | None = None,
        up_to_attempt: int | None = None,
    ) -> bool:
        return await self._delete(self._of(job_id, None, up_to_attempt))

    async def delete_learner(self, name: str) -> None:
        await self._delete([self.learners[name]] if name in self.learners else [])

    async def delete_learner_of(
        self,
        job_id: str,
        learner: int,
        *,
        wait: float = 0.0,
        grace: float | None = None,
        up_to_attempt: int | None = None,
    ) -> bool:
        return await self._delete(self._of(job_id, learner, up_to_attempt))

    def _of(
        self, job_id: str, learner: int | None, up_to_attempt: int | None
    ) -> list[SimulatedLearner]:
        return [
            s
            for s in self.learners.values()
            if s.job_id == job_id
            and (learner is None or s.learner == learner)
            and (up_to_attempt is None or s.attempt <= up_to_attempt)
        ]

    async def _delete(self, doomed: list[SimulatedLearner]) -> bool:
        """Finished learners are forgotten at once; running ones stop when the test lets
        them (or, at random, within the call, as an agent's `wait` may see)."""
        await self._call()
        for learner in doomed:
            learner.deleting = True
            if learner.finished:
                self.learners.pop(learner.name, None)
            elif self.rng.random() < 0.5:
                self.stop(learner)
        return not any(learner.name in self.learners for learner in doomed)

    async def list_learners(self) -> list[LearnerStatus]:
        await self._call()
        return [learner.status() for learner in self.learners.values()]

    async def aclose(self) -> None:
        return None
