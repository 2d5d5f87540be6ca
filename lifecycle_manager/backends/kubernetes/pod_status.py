"""What a learner pod's status says, in dlaas's words. Pure.

A pod is read as the raw dict the API serves: its labels name the learner, its phase and its
containers' states say how it goes, and its conditions and container states carry the
cluster's reasons (FailedScheduling, ImagePullBackOff, OOMKilled, Evicted...), which are
turned into sentences a user can act on. The learner's end (exit code, exit report) is the
`shipper` container's, or the `fetch` init container's when that failed and the learner
never ran; its memory is the `program` container's, and so is an OOMKilled
(`lifecycle_manager.backends.kubernetes.manifests` has the pod's layout).
"""

from __future__ import annotations

import signal as signals
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from lifecycle_manager.backends.base import LearnerPhase, LearnerStatus
from lifecycle_manager.backends.kubernetes.manifests import (
    ATTEMPT_LABEL,
    FETCH_CONTAINER,
    JOB_LABEL,
    LEARNER_LABEL,
    PROGRAM_CONTAINER,
    SHIPPER_CONTAINER,
)
from storage.exit_reports import ExitReport

# Waiting reasons of a container whose image cannot be had; they fail the learner after a
# timeout (the registry may be down for a moment), except those that never heal by waiting.
PULL_FAILURES = frozenset({"ErrImagePull", "ImagePullBackOff", "InvalidImageName"})
HOPELESS = frozenset({"InvalidImageName"})
CONFIG_FAILURES = frozenset({"CreateContainerConfigError", "CreateContainerError"})
LEARNER_CONTAINERS = (FETCH_CONTAINER, PROGRAM_CONTAINER, SHIPPER_CONTAINER)


@dataclass(frozen=True)
class PodIdentity:
    job: str
    learner: int
    attempt: int
    name: str


@dataclass(frozen=True)
class Notice:
    """A cluster happening about one learner that the job's events should show."""

    code: str  # the cluster's word: FailedScheduling, ImagePullBackOff, ...
    message: str  # a sentence for the user


@dataclass(frozen=True)
class PodReading:
    identity: PodIdentity
    phase: LearnerPhase
    started: bool  # a container of the learner runs or ran
    deleting: bool
    exit_code: int | None = None
    reason: str = ""  # why it finished, once it has
    # Once it finished: whether a container of the learner was OOMKilled (None: the
    # learner's end is not known, e.g. the pod failed before it ran).
    oom_killed: bool | None = None
    # What the runner's exit report (the container's termination message) says, if any.
    exit_report: ExitReport | None = None
    notices: tuple[Notice, ...] = ()
    pull_failure: Notice | None = None  # the image cannot be pulled (yet)
    config_failure: Notice | None = None  # the container cannot be made


def identity(pod: Mapping[str, Any]) -> PodIdentity | None:
    meta = pod.get("metadata") or {}
    labels = meta.get("labels") or {}
    try:
        return PodIdentity(
            job=labels[JOB_LABEL],
            learner=int(labels[LEARNER_LABEL]),
            attempt=int(labels[ATTEMPT_LABEL]),
            name=meta["name"],
        )
    except (KeyError, ValueError):
        return None


def _states(status: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    """The state of each container of the learner, by name."""
    found: dict[str, Mapping[str, Any]] = {}
    for key in ("initContainerStatuses", "containerStatuses"):
        for container in status.get(key) or []:
            if container.get("name") in LEARNER_CONTAINERS:
                found[container["name"]] = container.get("state") or {}
    return found


def _ending(states: Mapping[str, Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """How the learner ended: the shipper's termination, or the fetch's when it failed (the
    learner then never ran); with the reason OOMKilled when any of its containers was."""
    terminated = states.get(SHIPPER_CONTAINER, {}).get("terminated")
    fetched = states.get(FETCH_CONTAINER, {}).get("terminated")
    if not terminated and fetched and fetched.get("exitCode") != 0:
        terminated = fetched
    oom = any(
        (state.get("terminated") or {}).get("reason") == "OOMKilled" for state in states.values()
    )
    if oom:
        return {**(terminated or {}), "reason": "OOMKilled"}
    return terminated


def _spec_of(pod: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    for container in (pod.get("spec") or {}).get("containers") or []:
        if container.get("name") == name:
            return container
    return {}


def describe_code(code: int | None) -> str:
    if code is None:
        return "exit status unknown"
    if code > 128 and code - 128 < signals.NSIG:
        try:
            return f"exit code {code} (killed by {signals.Signals(code - 128).name})"
        except ValueError:
            pass
    return f"exit code {code}"


def _terminated_reason(pod: Mapping[str, Any], terminated: Mapping[str, Any]) -> str:
    code = terminated.get("exitCode")
    why = terminated.get("reason") or ""
    message = (terminated.get("message") or "").strip()
    report = ExitReport.from_json(message)
    if report is not None:  # the runner's own word on how its command ended
        message = report.reason
    if why == "OOMKilled":
        limit = _memory_limit(pod)
        bound = f" of {limit}" if limit else ""
        return (
            f"out of memory: the learner was OOMKilled at its memory limit{bound} "
            f"({describe_code(code)}); raise `memory` in the manifest"
        )
    if why in ("ContainerCannotRun", "StartError"):
        return f"the learner container could not start ({why}): {message or describe_code(code)}"
    if why == "DeadlineExceeded":
        return "the pod ran past its deadline (DeadlineExceeded)"
    if message and why not in ("Error", "Completed"):
        return f"{describe_code(code)} ({why}: {message})"
    return describe_code(code)


def _memory_limit(pod: Mapping[str, Any]) -> str:
    resources = _spec_of(pod, PROGRAM_CONTAINER).get("resources") or {}
    return str((resources.get("limits") or {}).get("memory", ""))


def _pod_reason(status: Mapping[str, Any]) -> str:
    why = status.get("reason") or ""
    message = (status.get("message") or "").strip()
    if why == "Evicted":
        return f"the pod was evicted from its node: {message or 'no reason given'}"
    if why in ("NodeLost", "Shutdown", "NodeShutdown", "Terminated"):
        return f"the pod's node went away ({why}): {message or 'no reason given'}"
    if why == "DeadlineExceeded":
        return "the pod ran past its deadline (DeadlineExceeded)"
    if why or message:
        return f"the pod failed ({why or 'no reason'}): {message or 'no message'}"
    return ""


def _scheduling_notice(status: Mapping[str, Any]) -> Notice | None:
    for condition in status.get("conditions") or []:
        if (
            condition.get("type") == "PodScheduled"
            and condition.get("status") == "False"
            and condition.get("reason") == "Unschedulable"
        ):
            message = (condition.get("message") or "no node fits").strip()
            return Notice("FailedScheduling", f"cannot be scheduled yet: {message}")
    return None


def _waiting_notice(pod: Mapping[str, Any], waiting: Mapping[str, Any]) -> Notice | None:
    why = waiting.get("reason") or ""
    message = (waiting.get("message") or "").strip()
    if why in PULL_FAILURES:
        image = _image(pod)
        return Notice(why, f"its image {image} cannot be pulled ({why}): {message or 'no detail'}")
    if why in CONFIG_FAILURES:
        return Notice(why, f"its container cannot be created ({why}): {message or 'no detail'}")
    return None


def _image(pod: Mapping[str, Any]) -> str:
    return str(_spec_of(pod, PROGRAM_CONTAINER).get("image", "?"))


def read_pod(pod: Mapping[str, Any]) -> PodReading | None:
    """The learner's view of a pod, or None if the pod is not a dlaas learner."""
    who = identity(pod)
    if who is None:
        return None
    status = pod.get("status") or {}
    meta = pod.get("metadata") or {}
    states = _states(status)
    terminated = _ending(states)
    raw_phase = status.get("phase") or "Pending"
    phase = LearnerPhase(raw_phase) if raw_phase in LearnerPhase._value2member_map_ else None
    if phase is None:  # "Unknown": the node stopped reporting
        phase = LearnerPhase.PENDING
    started = any("running" in state or "terminated" in state for state in states.values())
    exit_code: int | None = None
    oom_killed: bool | None = None
    exit_report: ExitReport | None = None
    reason = ""
    if phase in (LearnerPhase.SUCCEEDED, LearnerPhase.FAILED):
        if terminated:
            exit_code = terminated.get("exitCode")
            oom_killed = terminated.get("reason") == "OOMKilled"
            reason = _terminated_reason(pod, terminated)
            exit_report = ExitReport.from_json(terminated.get("message") or "")
        pod_reason = _pod_reason(status)
        if pod_reason and not (terminated and terminated.get("reason") == "OOMKilled"):
            reason = pod_reason if not terminated else f"{reason}; {pod_reason}"
        if not reason:
            reason = "exit code 0" if phase is LearnerPhase.SUCCEEDED else "the pod failed"
        if exit_code is None and phase is LearnerPhase.SUCCEEDED:
            exit_code = 0
    notices: list[Notice] = []
    pull_failure = config_failure = None
    if phase in (LearnerPhase.SUCCEEDED, LearnerPhase.FAILED):
        # The runner's own exit report may reach the job first and cannot know this.
        cause = (terminated or {}).get("reason") if terminated else None
        cause = cause if cause == "OOMKilled" else status.get("reason")
        if cause in ("OOMKilled", "Evicted", "NodeLost", "Shutdown", "NodeShutdown"):
            notices.append(Notice(str(cause), reason))
    if phase is LearnerPhase.PENDING:
        scheduling = _scheduling_notice(status)
        if scheduling:
            notices.append(scheduling)
        waiting_notice = next(
            (
                notice
                for state in states.values()
                if (notice := _waiting_notice(pod, state.get("waiting") or {}))
            ),
            None,
        )
        if waiting_notice:
            notices.append(waiting_notice)
            if waiting_notice.code in PULL_FAILURES:
                pull_failure = waiting_notice
            else:
                config_failure = waiting_notice
    return PodReading(
        identity=who,
        phase=phase,
        started=started,
        deleting=bool(meta.get("deletionTimestamp")),
        exit_code=exit_code,
        reason=reason,
        oom_killed=oom_killed,
        exit_report=exit_report,
        notices=tuple(notices),
        pull_failure=pull_failure,
        config_failure=config_failure,
    )


def learner_status(pod: Mapping[str, Any]) -> LearnerStatus | None:
    reading = read_pod(pod)
    if reading is None:
        return None
    who = reading.identity
    return LearnerStatus(
        job_id=who.job,
        learner=who.learner,
        attempt=who.attempt,
        name=who.name,
        phase=reading.phase,
        exit_code=reading.exit_code,
        reason=reading.reason,
        stopping=reading.deleting,
        oom_killed=reading.oom_killed,
        told_to_stop=reading.exit_report is not None and reading.exit_report.stopped,
        last_line=reading.exit_report.last_line if reading.exit_report else "",
    )
