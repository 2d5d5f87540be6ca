"""Stop dlaas on Kubernetes in order: the workers, then the learners, then the monitor.

    python -m lifecycle_manager.backends.kubernetes.shutdown --namespace NS \\
        --learners-namespace LNS --worker DEPLOYMENT --worker-selector k=v,... \\
        --monitor DEPLOYMENT --monitor-selector k=v,... [--timeout 240]

The chart's `pre-delete` hook: `helm uninstall` runs it before it deletes anything, while
the API (whose object gateway takes the learners' stop checkpoints), the object storage,
Redis and the database still run. The order and when a step is over are
`lifecycle_manager.decisions.shutdown_order`'s; this module lists, scales and deletes.
A worker autoscaler leaves a Deployment scaled to 0 alone (scaling is disabled at 0 replicas).

Every step is bounded by one deadline for the whole (`--timeout`): when it passes, the
hook says what it still waited for and exits 0, and Helm deletes the rest (a learner
still running then loses what it did not checkpoint). A call the Kubernetes API keeps
failing exits non-zero: `helm uninstall` stops and says so (`--no-hooks` skips the hook).
"""

from __future__ import annotations

import argparse
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kubernetes import client

from lifecycle_manager.backends.kubernetes.client import Caller, api_client
from lifecycle_manager.backends.kubernetes.manifests import MANAGED_BY, ROLE_LABEL
from lifecycle_manager.decisions.shutdown_order import (
    ORDER,
    SCALED,
    PodView,
    Stage,
    next_step,
    parse_selector,
)
from storage.settings import Settings

log = logging.getLogger("dlaas.shutdown")

LEARNER_SELECTOR = {MANAGED_BY: "dlaas", ROLE_LABEL: "learner"}
POLL_S = 0.5
DEFAULT_TIMEOUT_S = 240.0


@dataclass(frozen=True)
class Plan:
    namespace: str  # the release's: its workers and monitor
    learners_namespace: str
    worker: str  # the Deployments' names
    worker_selector: Mapping[str, str]
    monitor: str
    monitor_selector: Mapping[str, str]
    timeout_s: float = DEFAULT_TIMEOUT_S

    def where(self, stage: Stage) -> tuple[str, Mapping[str, str]]:
        """The namespace and the labels of the stage's pods."""
        if stage is Stage.WORKERS:
            return self.namespace, self.worker_selector
        if stage is Stage.MONITOR:
            return self.namespace, self.monitor_selector
        return self.learners_namespace, LEARNER_SELECTOR

    def deployment(self, stage: Stage) -> str:
        return self.worker if stage is Stage.WORKERS else self.monitor


@dataclass
class Report:
    stopped: dict[Stage, list[str]] = field(default_factory=dict)  # the pods each waited for
    left: list[str] = field(default_factory=list)  # pods still there when time ran out
    timed_out: Stage | None = None


def pod_view(pod: Mapping[str, Any]) -> PodView:
    meta = pod.get("metadata") or {}
    phase = (pod.get("status") or {}).get("phase")
    return PodView(
        name=str(meta.get("name", "")),
        labels=meta.get("labels") or {},
        terminating=bool(meta.get("deletionTimestamp")),
        finished=phase in ("Succeeded", "Failed"),
    )


def _selector(labels: Mapping[str, str]) -> str:
    return ",".join(f"{key}={value}" for key, value in sorted(labels.items()))


class Shutdown:
    def __init__(
        self,
        calls: Caller,
        plan: Plan,
        *,
        poll_s: float = POLL_S,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        say: Callable[[str], None] = log.info,
    ) -> None:
        self.calls = calls
        self.apps = client.AppsV1Api(calls.api)
        self.plan = plan
        self.poll_s = poll_s
        self.clock = clock
        self.sleep = sleep
        self.say = say

    def run(self) -> Report:
        report = Report()
        deadline = self.clock() + self.plan.timeout_s
        for stage in ORDER:
            if stage in SCALED:
                self._scale_to_zero(self.plan.deployment(stage))
            seen: set[str] = set()
            left = self._wait(stage, deadline, seen)
            report.stopped[stage] = sorted(seen)
            if left:
                report.timed_out, report.left = stage, left
                self.say(
                    f"gave up after {self.plan.timeout_s:g} s waiting for the {stage} to stop "
                    f"({', '.join(left)}): Helm deletes the rest now"
                )
                return report
            self.say(self._done(stage, sorted(seen)))
        self.say("the learners stopped and their jobs are recorded as interrupted: they resume")
        return report

    def _wait(self, stage: Stage, deadline: float, seen: set[str]) -> list[str]:
        """Take the stage's steps until it is over ([]) or the deadline passed (the pods
        still waited for)."""
        namespace, selector = self.plan.where(stage)
        while True:
            pods = [pod_view(pod) for pod in self._pods(namespace, selector)]
            step = next_step(stage, pods, selector)
            seen.update(step.waiting_for)
            for name in step.delete:
                self.calls.delete(self.calls.core.delete_namespaced_pod, name, namespace)
            if step.done:
                return []
            if self.clock() >= deadline:
                return list(step.waiting_for)
            self.sleep(self.poll_s)

    def _pods(self, namespace: str, selector: Mapping[str, str]) -> list[dict[str, Any]]:
        answer = self.calls.json(
            self.calls.core.list_namespaced_pod, namespace, label_selector=_selector(selector)
        )
        return list(answer.get("items") or [])

    def _scale_to_zero(self, deployment: str) -> None:
        found = self.calls.call(
            self.apps.patch_namespaced_deployment_scale,
            deployment,
            self.plan.namespace,
            {"spec": {"replicas": 0}},
            accept=(404,),
        )
        if found.status == 404:
            self.say(f"no Deployment {deployment} to scale down")

    @staticmethod
    def _done(stage: Stage, pods: list[str]) -> str:
        if stage is Stage.WORKERS:
            return f"the workers are scaled to 0 ({len(pods)} stopped): no learner is created"
        if stage is Stage.LEARNERS:
            return (
                f"{len(pods)} learner pod(s) stopped with their grace period, their stop "
                "checkpoints stored" + (f": {', '.join(pods)}" if pods else "")
            )
        return "the monitor is scaled to 0, the learners' last events handled"


def parse_args(argv: list[str] | None = None) -> Plan:
    parser = argparse.ArgumentParser(
        prog="python -m lifecycle_manager.backends.kubernetes.shutdown",
        description="Stop the workers, then the learners, then the monitor (helm uninstall).",
    )
    parser.add_argument("--namespace", required=True)
    parser.add_argument("--learners-namespace", required=True)
    parser.add_argument("--worker", required=True)
    parser.add_argument("--worker-selector", required=True)
    parser.add_argument("--monitor", required=True)
    parser.add_argument("--monitor-selector", required=True)
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S)
    args = parser.parse_args(argv)
    return Plan(
        namespace=args.namespace,
        learners_namespace=args.learners_namespace,
        worker=args.worker,
        worker_selector=parse_selector(args.worker_selector),
        monitor=args.monitor,
        monitor_selector=parse_selector(args.monitor_selector),
        timeout_s=args.timeout,
    )


def main(argv: list[str] | None = None) -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    plan = parse_args(argv)
    settings = Settings()
    calls = Caller(api_client(settings), timeout=settings.kube_request_timeout_s)
    try:
        Shutdown(calls, plan).run()
    finally:
        calls.close()


if __name__ == "__main__":
    main()
