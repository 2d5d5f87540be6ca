"""Gang admission over nodes and pods, and pods read as learner events and job notices."""

from __future__ import annotations

from typing import Any

from lifecycle_manager.backends.base import OOM_KILLED_FIELD
from lifecycle_manager.backends.kubernetes.admission import Amount, admit, pod_request
from lifecycle_manager.backends.kubernetes.pod_events import JobNotice, PodTracker
from lifecycle_manager.backends.kubernetes.pod_status import learner_status
from storage import streams
from storage.exit_reports import ExitReport


def node(name: str, cpu: str, memory: str, gpus: str = "0", **extra: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": extra.pop("labels", {})},
        "spec": extra,
        "status": {
            "allocatable": {"cpu": cpu, "memory": memory, "nvidia.com/gpu": gpus},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def pod(
    cpu: str = "1", memory: str = "1Gi", gpus: int = 0, node_name: str = "", **spec: Any
) -> dict[str, Any]:
    requests = {"cpu": cpu, "memory": memory}
    limits = {"nvidia.com/gpu": str(gpus)} if gpus else {}
    container = {"name": "learner", "resources": {"requests": requests, "limits": limits}}
    body: dict[str, Any] = {"containers": [container], **spec}
    if node_name:
        body["nodeName"] = node_name
    return {"metadata": {"name": "p"}, "spec": body, "status": {"phase": "Running"}}


def test_requests_count_sidecars_and_limits_without_requests() -> None:
    sidecar = {"name": "ps", "restartPolicy": "Always", "resources": {"requests": {"cpu": "100m"}}}
    assert pod_request(pod(cpu="1500m", memory="2Gi", gpus=2, initContainers=[sidecar])) == (
        Amount(millicpu=1600, memory=2 * 2**30, gpus=2)
    )


def test_a_gang_fits_only_whole_and_per_node() -> None:
    nodes = [node("a", "8", "32Gi", "2"), node("b", "8", "32Gi", "2")]
    assert admit([pod(gpus=2), pod(gpus=2)], nodes, []) is None
    # Four GPUs in all, but no node has room for a 4-GPU learner.
    reason = admit([pod(gpus=4)], nodes, [])
    assert reason is not None and "cannot hold all 1 learner at once (room for 0)" in reason
    # Pods already running take their room; so do pods still waiting for a node.
    assert admit([pod(gpus=2)], nodes, [pod(gpus=2, node_name="a"), pod(gpus=2)]) is not None
    finished = pod(gpus=2, node_name="a")
    finished["status"]["phase"] = "Succeeded"
    assert admit([pod(gpus=2), pod(gpus=2)], nodes, [finished]) is None


def test_node_selectors_taints_and_unready_nodes_limit_where_a_gang_goes() -> None:
    tainted = node("gpu", "8", "32Gi", "4", taints=[{"key": "gpu", "effect": "NoSchedule"}])
    unready = node("down", "64", "256Gi", "8")
    unready["status"]["conditions"] = [{"type": "Ready", "status": "False"}]
    labelled = node("cpu", "8", "32Gi", labels={"pool": "cpu"})
    nodes = [tainted, unready, labelled]
    assert admit([pod(gpus=1)], nodes, []) is not None  # only the tainted node has GPUs
    tolerating = pod(gpus=1, tolerations=[{"key": "gpu", "operator": "Exists"}])
    assert admit([tolerating], nodes, []) is None
    assert admit([pod(cpu="4", nodeSelector={"pool": "cpu"})], nodes, []) is None
    assert admit([pod(cpu="4", nodeSelector={"pool": "gpu"})], nodes, []) is not None


def learner_pod(phase: str = "Pending", **status: Any) -> dict[str, Any]:
    return {
        "metadata": {
            "name": "dlaas-j-learner-2-a1",
            "labels": {"dlaas.io/job": "j", "dlaas.io/learner": "2", "dlaas.io/attempt": "1"},
        },
        "spec": {
            "containers": [
                {"name": "program", "image": "img:1", "resources": {"limits": {"memory": "1Gi"}}},
                {"name": "shipper", "image": "img:1", "resources": {"limits": {"memory": "1Gi"}}},
            ]
        },
        "status": {"phase": phase, **status},
    }


def state(**state: Any) -> list[dict[str, Any]]:
    """The same state for the learner's program and shipper containers."""
    return [{"name": name, "state": state} for name in ("program", "shipper")]


def test_running_then_oomkilled_pod_gives_one_status_and_one_exit() -> None:
    tracker = PodTracker()
    assert tracker.seen("ADDED", learner_pod()) == []
    running = learner_pod("Running", containerStatuses=state(running={}))
    [started] = tracker.seen("MODIFIED", running)
    assert started == streams.status_event("j", 2, 1, "DOWNLOADING", time=started.time)
    assert tracker.seen("MODIFIED", running) == []  # no repeats
    oom = learner_pod(
        "Failed", containerStatuses=state(terminated={"exitCode": 137, "reason": "OOMKilled"})
    )
    notice, exit_event = tracker.seen("MODIFIED", oom)
    assert isinstance(notice, JobNotice) and notice.notice.code == "OOMKilled"
    assert isinstance(exit_event, streams.LearnerEvent) and exit_event.kind == streams.EXIT
    assert exit_event.fields["exit_code"] == "137"
    assert "OOMKilled at its memory limit of 1Gi" in exit_event.fields["reason"]
    assert exit_event.fields[OOM_KILLED_FIELD] == "1"
    assert tracker.seen("DELETED", oom) == []
    assert len(tracker) == 0


def test_exits_say_whether_the_cluster_killed_the_learner_for_memory() -> None:
    killed = learner_pod(
        "Failed", containerStatuses=state(terminated={"exitCode": 137, "reason": "Error"})
    )
    *_, exit_event = PodTracker().seen("MODIFIED", killed)  # after its start
    assert exit_event.fields[OOM_KILLED_FIELD] == "0"  # a SIGKILL, not the OOM killer
    status = learner_status(killed)
    assert status is not None and status.oom_killed is False
    oom = learner_pod(
        "Failed", containerStatuses=state(terminated={"exitCode": 137, "reason": "OOMKilled"})
    )
    status = learner_status(oom)
    assert status is not None and status.oom_killed is True
    # Gone before its container ended: the cluster cannot say.
    [vanished] = PodTracker().seen("DELETED", learner_pod("Running"))
    assert OOM_KILLED_FIELD not in vanished.fields
    still_running = learner_status(learner_pod("Running", containerStatuses=state(running={})))
    assert still_running is not None and still_running.oom_killed is None


def test_the_runners_exit_report_in_the_termination_message_says_how_it_ended() -> None:
    report = ExitReport(143, "SIGTERM", "stopped by SIGTERM", stopped=True, last_line="step 41")
    ended = learner_pod(
        "Failed",
        containerStatuses=state(
            terminated={"exitCode": 143, "reason": "Error", "message": report.to_json()}
        ),
    )
    status = learner_status(ended)
    assert status is not None
    assert (status.exit_code, status.told_to_stop, status.last_line) == (143, True, "step 41")
    *_, exit_event = PodTracker().seen("MODIFIED", ended)
    assert (exit_event.fields["stopped"], exit_event.fields["last_line"]) == ("1", "step 41")
    # A message that is no exit report (the runtime's own) is a reason, as it was.
    refused = learner_pod(
        "Failed",
        containerStatuses=state(
            terminated={"exitCode": 128, "reason": "StartError", "message": "no such file"}
        ),
    )
    status = learner_status(refused)
    assert status is not None and not status.told_to_stop and status.last_line == ""
    assert "could not start (StartError): no such file" in status.reason


def ended_pod(program_reason: str, report: ExitReport) -> dict[str, Any]:
    """A learner pod whose program ended with `program_reason` and whose shipper reported."""
    code = report.exit_code
    shipper = {"exitCode": code, "reason": "Error", "message": report.to_json()}
    return learner_pod(
        "Failed",
        containerStatuses=[
            {
                "name": "program",
                "state": {"terminated": {"exitCode": code, "reason": program_reason}},
            },
            {"name": "shipper", "state": {"terminated": shipper}},
        ],
    )


def test_the_shipper_says_how_the_learner_ended_and_the_program_whether_it_ran_out_of_memory() -> (
    None
):
    report = ExitReport(137, "SIGKILL", "the command was killed by SIGKILL", stopped=False)
    status = learner_status(ended_pod("OOMKilled", report))
    assert status is not None
    assert (status.exit_code, status.oom_killed) == (137, True)
    assert status.reason.startswith("out of memory: the learner was OOMKilled at its memory limit")
    # A program that exited by itself: the shipper's code is the learner's, its message too.
    stopped = ExitReport(143, "SIGTERM", "stopped by SIGTERM", stopped=True, last_line="s 3")
    status = learner_status(ended_pod("Error", stopped))
    assert status is not None
    assert (status.exit_code, status.oom_killed, status.told_to_stop) == (143, False, True)


def test_a_failed_fetch_is_the_learners_end_and_its_start_is_the_learners() -> None:
    fetching = learner_pod(
        "Pending",
        initContainerStatuses=[{"name": "fetch", "state": {"running": {}}}],
        containerStatuses=[
            {"name": n, "state": {"waiting": {"reason": "PodInitializing"}}}
            for n in ("program", "shipper")
        ],
    )
    tracker = PodTracker()
    [downloading] = tracker.seen("MODIFIED", fetching)
    assert downloading.fields["state"] == "DOWNLOADING"
    report = ExitReport(3, None, "could not fetch the model archive", stopped=False)
    failed = learner_pod(
        "Failed",
        initContainerStatuses=[
            {
                "name": "fetch",
                "state": {
                    "terminated": {"exitCode": 3, "reason": "Error", "message": report.to_json()}
                },
            }
        ],
        containerStatuses=[
            {"name": n, "state": {"waiting": {"reason": "PodInitializing"}}}
            for n in ("program", "shipper")
        ],
    )
    status = learner_status(failed)
    assert status is not None
    assert (status.exit_code, status.oom_killed, status.reason) == (3, False, "exit code 3")
    [exit_event] = tracker.seen("MODIFIED", failed)
    assert exit_event.fields["exit_code"] == "3"


def test_a_pod_deleted_or_lost_before_it_finished_is_an_exit_without_a_code() -> None:
    tracker = PodTracker()
    tracker.seen("ADDED", learner_pod("Running", containerStatuses=state(running={})))
    [gone] = tracker.relisted([])
    assert gone.fields["exit_code"] == ""
    assert gone.fields["reason"] == "the pod disappeared while the watch was down"
    evicted = learner_pod("Running", reason="Evicted", message="The node was low on memory.")
    [deleted] = PodTracker().seen("DELETED", evicted)
    assert "evicted from its node: The node was low on memory." in deleted.fields["reason"]


def test_scheduling_and_image_troubles_are_notices_and_a_stuck_pull_fails_after_a_while() -> None:
    now = [0.0]
    tracker = PodTracker(pull_timeout_s=60, clock=lambda: now[0])
    unschedulable = learner_pod(
        conditions=[
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "message": "0/2 nodes are available: 2 Insufficient nvidia.com/gpu.",
            }
        ]
    )
    [notice] = tracker.seen("MODIFIED", unschedulable)
    assert isinstance(notice, JobNotice)
    assert notice.notice.code == "FailedScheduling"
    assert tracker.seen("MODIFIED", unschedulable) == []
    pulling = learner_pod(
        containerStatuses=state(waiting={"reason": "ImagePullBackOff", "message": "not found"})
    )
    [pull] = tracker.seen("MODIFIED", pulling)
    assert isinstance(pull, JobNotice)
    assert pull.notice.message == "its image img:1 cannot be pulled (ImagePullBackOff): not found"
    now[0] = 61.0
    [failed] = tracker.seen("MODIFIED", pulling)
    assert isinstance(failed, streams.LearnerEvent) and failed.kind == streams.EXIT
    assert failed.fields["source"] == "kubernetes"
