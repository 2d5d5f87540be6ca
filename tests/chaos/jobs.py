"""The chaos tests' job: the stepper program (`stepper/train.py`), and what to check of it.

A stepper job that completes with the digest of an uninterrupted run did every step exactly
once from each restored state: no work between a restored checkpoint and a kill leaked into
the result, and no step was skipped.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.chaos.stepper.train import final_digest
from tests.e2e.conftest import Platform, Shown

STEPPER = Path(__file__).resolve().parent / "stepper"
FINAL = ("COMPLETED", "FAILED", "HALTED")


def stepper_manifest(
    directory: Path,
    *,
    name: str,
    steps: int,
    learners: int = 1,
    step_delay: float = 0.02,
    checkpoint_mb: int = 0,
    term_grace: float = 0.0,
    checkpoint_on_term: bool = False,
    interval_s: float = 1.0,
    keep: int = 2,
    max_restarts: int = 12,
    heartbeat_timeout_s: float = 4.0,
    scope: str = "gang",
    result_mb: int = 0,
) -> Path:
    command = f"python train.py --steps {steps} --step-delay {step_delay}"
    if checkpoint_mb:
        command += f" --checkpoint-mb {checkpoint_mb}"
    if term_grace:
        command += f" --term-grace {term_grace}"
    if checkpoint_on_term:
        command += " --checkpoint-on-term"
    if result_mb:
        command += f" --result-mb {result_mb}"
    path = directory / f"{name}.yml"
    path.write_text(
        f"name: {name}\nlearners: {learners}\ncpus: 0.5\nmemory: 512Mi\n"
        f"framework:\n  name: python\n  command: {json.dumps(command)}\n"
        f"checkpoint: {{interval_s: {interval_s}, keep: {keep}}}\n"
        f"restart_policy: {{max_restarts: {max_restarts}, backoff_s: 0.1, backoff_max_s: 0.2, "
        f"heartbeat_timeout_s: {heartbeat_timeout_s}, scope: {scope}}}\n"
    )
    return path


def submit_stepper(platform: Platform, directory: Path, **options: Any) -> str:
    return platform.submit(stepper_manifest(directory, **options), STEPPER)


def kinds(shown: Shown) -> list[str]:
    return [event["kind"] for event in shown["events"]]


def events(shown: Shown, kind: str) -> list[dict[str, Any]]:
    return [event for event in shown["events"] if event["kind"] == kind]


def in_state(*states: str) -> Callable[[Shown], bool]:
    return lambda shown: shown["job"]["state"] in states


def training(attempt: int) -> Callable[[Shown], bool]:
    """The job is RUNNING its `attempt`-th attempt (or a later one)."""
    return lambda shown: shown["job"]["state"] == "RUNNING" and shown["job"]["attempt"] >= attempt


def runner_pid(platform: Platform, job_id: str, attempt: int, learner: int = 1) -> int:
    """The runner of one learner of an attempt, as the node agent lists it."""
    for record in platform.learners(job_id):
        if record["attempt"] == attempt and record["learner"] == learner and record["pid"]:
            return int(record["pid"])
    raise AssertionError(f"the agent runs no learner {learner} of attempt {attempt}")


def finish(platform: Platform, job_id: str, timeout: float = 60) -> Shown:
    return platform.wait_for(job_id, "a final state", in_state(*FINAL), timeout)


def assert_completed_exactly(platform: Platform, job_id: str, steps: int, tmp_path: Path) -> Shown:
    """The job COMPLETED once, with the result of an uninterrupted run, and left no learner
    running."""
    shown = finish(platform, job_id)
    assert shown["job"]["state"] == "COMPLETED", shown
    dest = tmp_path / f"results-{job_id}"
    platform.dlaas("download", job_id, "--dest", str(dest))
    result = json.loads((dest / "result.json").read_text())
    assert result == {"steps": steps, "digest": final_digest(steps)}, result
    listed = platform.json("list")
    assert isinstance(listed, dict)
    assert [job["id"] for job in listed["jobs"]].count(job_id) == 1
    assert_no_learner_left(platform, job_id)
    return shown


def assert_no_learner_left(platform: Platform, job_id: str, timeout_s: float = 15) -> None:
    """No learner of the job runs once its runners have had time to exit (each reports its
    exit just before it does)."""
    deadline = time.monotonic() + timeout_s
    while running := [r for r in platform.learners(job_id) if r["phase"] in ("Pending", "Running")]:
        assert time.monotonic() < deadline, f"learners left running: {running}"
        time.sleep(0.1)
