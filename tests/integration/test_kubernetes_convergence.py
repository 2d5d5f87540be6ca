"""Model-based test of the Kubernetes backend (`kube_convergence` is the model): every job
settles as its pods and its user dictate, whatever the interleaving; and the stories the
search found, told again step by step.

On SQLite and PostgreSQL, against the API emulator and the real Redis.
`DLAAS_KUBE_CONVERGENCE_EXAMPLES` raises the number of runs for a longer search.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from hypothesis.stateful import run_state_machine_as_test

from tests.integration import kube_harness
from tests.integration import test_lifecycle_harness as harness
from tests.integration.kube_convergence import (
    Action,
    Heard,
    Held,
    JobSpec,
    KubeConvergence,
    PodEnds,
    PodStarts,
    PodVanishes,
    Reconcile,
    RunTask,
    TaskLost,
    UserAsks,
    WatcherDelivers,
)
from tests.integration.kube_harness import emulator_with_a_node, kube_settings
from tests.kube.emulator import RunningEmulator
from tests.kube.kubelet import Kubelet

database_url = harness.database_url
namespace = kube_harness.namespace

EXAMPLES = int(os.environ.get("DLAAS_KUBE_CONVERGENCE_EXAMPLES", "20"))
STEPS = 30


@pytest.fixture
def emulator() -> Iterator[RunningEmulator]:
    """One that keeps no log of requests: a run sends thousands, each matched against the log."""
    with emulator_with_a_node(keep_requests=False) as running:
        yield running


def test_every_job_on_kubernetes_settles_as_its_pods_and_its_user_dictate(
    tmp_path: Path,
    database_url: str,
    redis_url: str,
    emulator: RunningEmulator,
    namespace: str,
) -> None:
    settings_ = kube_settings(tmp_path, redis_url, emulator, namespace, database_url)
    with Kubelet(emulator.url, namespace, hold=True) as kubelet:
        run_state_machine_as_test(
            lambda: KubeConvergence(settings_, emulator, kubelet),
            settings=settings(
                max_examples=EXAMPLES,
                stateful_step_count=STEPS,
                deadline=None,
                derandomize=True,
                database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
            ),
        )


# Stories the search found, told again as they went: each broke a job before its fix.
Step = Action | list[list[Action]]  # one action alone, or scripts played at once
STORIES: dict[str, tuple[list[JobSpec], list[Step]]] = {
    # The reconcile listed the pods, then a deploy created one and it started, and the
    # reconcile took the learner, running but missing from its older list, for vanished:
    # a restart spent and a healthy pod deleted.
    "a reconcile's list older than a learner": (
        [JobSpec(1, None, 0, nudged=True)],
        [[[Held(Reconcile(), 3, before=False)], [RunTask(0), Heard(PodStarts(0))]]],
    ),
    # The learner's end (here, its pod deleted) reached the monitor after the user halted
    # and before the halt task ran (here, lost): the job went HALTED on it, and its pods
    # were never stopped. (Its Secret and Service now stay for its resume, by design.)
    "a halt its learners' ends complete": (
        [JobSpec(1, None, 0, nudged=True)],
        [RunTask(0), PodVanishes(0), UserAsks("halt", 0), TaskLost(0), WatcherDelivers()],
    ),
    # A deploy task run again on a DEPLOYING job (the reconcile had deployed it) created
    # its missing pods only after the job had completed and its pod and Secret were
    # deleted: it left the pod running, and once that went, the Secret for good.
    "a deploy run again as its job finished": (
        [JobSpec(1, None, 0, nudged=True)],
        [
            Reconcile(),
            [[Held(RunTask(0), 1, before=True)], [Heard(PodEnds(0, 0))]],
            PodVanishes(0),
        ],
    ),
    # The pod failed. The recover task read the job RECOVERING but was slow to reach the
    # cluster: the reconcile recovered the job first (attempt 2's pod), then the task
    # deleted every pod of the job, attempt 2's too: a vanished learner, a restart spent.
    # (Deletes now name the attempts they mean.)
    "two recoveries at once": (
        [JobSpec(1, None, 0, nudged=True)],
        [
            RunTask(0),
            Heard(PodEnds(0, 1)),
            [[Held(RunTask(0), 1, before=True)], [Reconcile()]],
        ],
    ),
    # The halt task marked the learners stopping; the user resumed, and the resume task
    # finished the halt and deployed attempt 2. The halt task then deleted attempt 2's pod
    # and moved the resumed job to HALTED.
    "a halt task overtaken by a resume": (
        [JobSpec(1, None, 0, nudged=True)],
        [
            RunTask(0),
            Heard(PodStarts(0)),
            UserAsks("halt", 0),
            [[Held(RunTask(0), 2, before=True)], [UserAsks("resume", 0), RunTask(0)]],
        ],
    ),
}


@pytest.mark.parametrize(
    "story",
    sorted(STORIES),
)
def test_a_story_found_before_ends_as_its_pods_and_its_user_dictate(
    story: str, tmp_path: Path, redis_url: str, emulator: RunningEmulator, namespace: str
) -> None:
    jobs, steps = STORIES[story]
    settings_ = kube_settings(tmp_path, redis_url, emulator, namespace)  # on SQLite
    with Kubelet(emulator.url, namespace, hold=True) as kubelet:
        machine = KubeConvergence(settings_, emulator, kubelet)
        try:
            machine.start(jobs)
            for step in steps:
                if isinstance(step, list):
                    machine.several_act_at_once(step)
                else:
                    machine.one_acts(step)
                machine.every_job_has_one_chain_of_events()
        finally:
            machine.teardown()
