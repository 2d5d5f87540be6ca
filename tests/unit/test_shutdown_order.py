"""The order dlaas on Kubernetes stops in, and when each step is over."""

from __future__ import annotations

import pytest

from lifecycle_manager.decisions.shutdown_order import (
    ORDER,
    PodView,
    Stage,
    Step,
    next_step,
    parse_selector,
)

LEARNER = {"app.kubernetes.io/managed-by": "dlaas", "dlaas.io/role": "learner"}


def pod(
    name: str,
    *,
    terminating: bool = False,
    finished: bool = False,
    labels: dict[str, str] = LEARNER,
) -> PodView:
    return PodView(name, labels, terminating=terminating, finished=finished)


def test_the_workers_stop_before_the_learners_and_the_learners_before_the_monitor() -> None:
    assert ORDER == (Stage.WORKERS, Stage.LEARNERS, Stage.MONITOR)


def test_learners_still_running_are_deleted_and_waited_for_with_those_stopping() -> None:
    pods = [pod("b"), pod("a", terminating=True), pod("c")]
    assert next_step(Stage.LEARNERS, pods, LEARNER) == Step(
        delete=("b", "c"), waiting_for=("a", "b", "c")
    )


def test_learners_that_finished_or_are_not_learners_are_left_alone() -> None:
    pods = [pod("done", finished=True), pod("other", labels={"app": "other"})]
    assert next_step(Stage.LEARNERS, pods, LEARNER) == Step(done=True)
    assert next_step(Stage.LEARNERS, [], LEARNER).done


@pytest.mark.parametrize("stage", [Stage.WORKERS, Stage.MONITOR])
def test_a_scaled_deployments_pods_are_waited_for_not_deleted(stage: Stage) -> None:
    labels = {"app.kubernetes.io/component": "worker"}
    pods = [pod("w-1", labels=labels), pod("w-2", labels=labels, terminating=True)]
    assert next_step(stage, pods, labels) == Step(waiting_for=("w-1", "w-2"))
    assert next_step(stage, [pod("l-1")], labels).done  # a learner is not one of its pods


def test_selectors_are_equality_terms() -> None:
    assert parse_selector("a=b, c=d") == {"a": "b", "c": "d"}
    assert parse_selector("") == {}
    for bad in ("a", "a==b", "=b", "a!=b"):
        with pytest.raises(ValueError, match="label selector"):
            parse_selector(bad)
