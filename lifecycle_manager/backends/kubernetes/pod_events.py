"""From the successive states of learner pods to learner events and job notices, once each.

Pure but for a clock. The pod watcher feeds every pod it sees (ADDED, MODIFIED, DELETED, or
a re-list); the tracker answers with what is new:

- a container of the learner started (its `fetch` init container first) -> a `status`
  event DOWNLOADING (the learner's helpers report its later states; a status that does not
  advance a learner is ignored downstream);
- the pod Succeeded or Failed -> an `exit` event with the learner's exit code (its
  `shipper`'s, or its `fetch`'s when that failed) and the cluster's reason (OOMKilled,
  Evicted, ...), `oom_killed` (`1` or `0`) once the learner's end is known, and what its
  exit report (the termination message) says: `stopped`, `last_line`;
- the pod vanished before it finished (deleted, or gone while the watch was down) -> an
  `exit` event with no exit code;
- an image that cannot be pulled for longer than the pull timeout, or a container that
  cannot be made -> an `exit` event, so the job does not wait for ever;
- FailedScheduling, ImagePullBackOff and the like -> a `Notice` for the job's events.

Events may repeat after a restart of the watcher; the lifecycle manager ignores repeats.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from lifecycle_manager.backends.base import OOM_KILLED_FIELD, LearnerPhase
from lifecycle_manager.backends.kubernetes.pod_status import (
    HOPELESS,
    Notice,
    PodIdentity,
    PodReading,
    read_pod,
)
from storage import streams
from storage.exit_reports import ExitReport
from storage.job_states import LearnerState

DELETED = "DELETED"


@dataclass(frozen=True)
class JobNotice:
    job: str
    learner: int
    attempt: int
    pod: str
    notice: Notice


Output = streams.LearnerEvent | JobNotice


@dataclass
class _PodMemory:
    identity: PodIdentity
    started: bool = False
    finished: bool = False
    notices: set[tuple[str, str]] = field(default_factory=set)
    pull_failing_since: float | None = None


class PodTracker:
    def __init__(
        self, pull_timeout_s: float = 300.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.pull_timeout_s = pull_timeout_s
        self.clock = clock
        self._pods: dict[str, _PodMemory] = {}

    def __len__(self) -> int:
        return len(self._pods)

    def seen(self, kind: str, pod: Mapping[str, Any]) -> list[Output]:
        reading = read_pod(pod)
        if reading is None:
            return []
        name = reading.identity.name
        memory = self._pods.setdefault(name, _PodMemory(reading.identity))
        out = self._advance(memory, reading)
        if kind == DELETED:
            out += self._vanished(memory, _deleted_reason(pod))
            del self._pods[name]
        return out

    def relisted(self, pods: Iterable[Mapping[str, Any]]) -> list[Output]:
        """A full list replaces what the watch said: pods missing from it are gone."""
        out: list[Output] = []
        present = set()
        for pod in pods:
            reading = read_pod(pod)
            if reading is not None:
                present.add(reading.identity.name)
                out += self.seen("ADDED", pod)
        for name in set(self._pods) - present:
            memory = self._pods.pop(name)
            out += self._vanished(memory, "the pod disappeared while the watch was down")
        return out

    def _advance(self, memory: _PodMemory, reading: PodReading) -> list[Output]:
        who = reading.identity
        out: list[Output] = []
        for notice in reading.notices:
            key = (notice.code, notice.message)
            if key not in memory.notices:
                memory.notices.add(key)
                out.append(JobNotice(who.job, who.learner, who.attempt, who.name, notice))
        if memory.finished:
            return out
        if reading.started and not memory.started:
            memory.started = True
            out.append(
                streams.status_event(who.job, who.learner, who.attempt, LearnerState.DOWNLOADING)
            )
        if reading.phase in (LearnerPhase.SUCCEEDED, LearnerPhase.FAILED):
            memory.finished = True
            out.append(
                _exit(
                    who, reading.exit_code, reading.reason, reading.oom_killed, reading.exit_report
                )
            )
        elif reading.config_failure is not None:
            memory.finished = True
            out.append(_exit(who, None, reading.config_failure.message))
        elif reading.pull_failure is not None:
            now = self.clock()
            if memory.pull_failing_since is None:
                memory.pull_failing_since = now
            waited = now - memory.pull_failing_since
            if reading.pull_failure.code in HOPELESS or waited >= self.pull_timeout_s:
                memory.finished = True
                out.append(_exit(who, None, reading.pull_failure.message))
        else:
            memory.pull_failing_since = None
        return out

    def _vanished(self, memory: _PodMemory, reason: str) -> list[Output]:
        if memory.finished:
            return []
        memory.finished = True
        return [_exit(memory.identity, None, reason)]


def _exit(
    who: PodIdentity,
    exit_code: int | None,
    reason: str,
    oom_killed: bool | None = None,
    report: ExitReport | None = None,
) -> streams.LearnerEvent:
    event = streams.exit_event(who.job, who.learner, who.attempt, exit_code, None, reason)
    fields = {**event.fields, "source": "kubernetes", "pod": who.name}
    if oom_killed is not None:
        fields[OOM_KILLED_FIELD] = "1" if oom_killed else "0"
    if report is not None:  # the runner's exit report, kept as the termination message
        fields["stopped"] = "1" if report.stopped else "0"
        fields["last_line"] = report.last_line
    return streams.LearnerEvent(
        event.job, event.learner, event.attempt, event.kind, fields, event.time
    )


def _deleted_reason(pod: Mapping[str, Any]) -> str:
    status = pod.get("status") or {}
    if status.get("reason") == "Evicted":
        return f"the pod was evicted from its node: {status.get('message') or 'no reason given'}"
    return "the pod was deleted before its learner finished"
