"""`restart_policy.scope: learner`: a killed learner restarts alone, from its own checkpoint,
while the others train on untouched."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.chaos import processes
from tests.chaos.jobs import (
    assert_completed_exactly,
    events,
    runner_pid,
    submit_stepper,
)
from tests.chaos.stepper.train import final_digest
from tests.e2e.conftest import Platform, Shown

pytestmark = pytest.mark.chaos


def _checkpointed_by(learner: int) -> Callable[[Shown], bool]:
    """The job runs and `learner` has committed a checkpoint of its own."""

    def check(shown: Shown) -> bool:
        return shown["job"]["state"] == "RUNNING" and any(
            event["detail"].get("learner") == learner for event in events(shown, "checkpoint")
        )

    return check


def _running_again(learner: int, attempt: int) -> Callable[[Shown], bool]:
    def check(shown: Shown) -> bool:
        return shown["job"]["state"] == "RUNNING" and any(
            event["detail"].get("learner") == learner and event["detail"].get("attempt") == attempt
            for event in events(shown, "resumed")
        )

    return check


def test_a_killed_learner_restarts_alone_from_its_own_checkpoint(
    platform: Platform, tmp_path: Path
) -> None:
    steps = 400
    job = submit_stepper(
        platform, tmp_path, name="scope-learner", steps=steps, learners=2, scope="learner"
    )
    platform.wait_for(job, "a checkpoint of learner 2", _checkpointed_by(2), 60)
    survivor = runner_pid(platform, job, 1, learner=1)
    survivor_program = processes.training_pid(survivor)
    processes.kill_training(runner_pid(platform, job, 1, learner=2))

    again = platform.wait_for(job, "learner 2 running again", _running_again(2, 2), 60)
    # Learner 1 was never stopped: the same runner and program, still of attempt 1.
    assert runner_pid(platform, job, 1, learner=1) == survivor
    assert processes.training_pid(survivor) == survivor_program
    assert processes.alive(survivor_program)
    replacement = runner_pid(platform, job, 2, learner=2)
    assert replacement != survivor
    states = [e["to_state"] for e in again["events"] if e["kind"] == "state"]
    restarted = states[states.index("RECOVERING") :]
    assert restarted[:2] == ["RECOVERING", "DEPLOYING"] and restarted[-1] == "RUNNING", states
    assert set(restarted[2:-1]) <= {"DOWNLOADING"}, states

    done = assert_completed_exactly(platform, job, steps, tmp_path)
    [restart] = events(done, "restart")
    failure = restart["detail"]["failure"]
    assert (failure["learner"], failure["cause"], failure["exit_code"]) == (2, "signal", 137)
    assert str(failure["checkpoint"]).startswith("learner-2/ckpt-"), failure
    assert f"from {failure['checkpoint']}" in restart["reason"]
    [resumed] = events(done, "resumed")  # learner 1 never resumed: it never stopped
    assert (resumed["detail"]["learner"], resumed["detail"]["attempt"]) == (2, 2)
    assert resumed["detail"]["name"] == failure["checkpoint"]
    assert {e["detail"]["learner"] for e in events(done, "checkpoint")} == {1, 2}
    logs = platform.dlaas("logs", job).stdout
    assert f"learner 2 resumes from checkpoint {failure['checkpoint']}" in logs
    # Learner 2's own result, too, is that of an uninterrupted run.
    second = json.loads((tmp_path / f"results-{job}" / "learner-2" / "result.json").read_text())
    assert second == {"steps": steps, "digest": final_digest(steps)}
