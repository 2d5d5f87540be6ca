"""Learners die or hang; the job restarts from its last committed checkpoint and completes."""

from __future__ import annotations

import os
import random
import re
import signal
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.chaos import processes
from tests.chaos.jobs import (
    assert_completed_exactly,
    assert_no_learner_left,
    events,
    finish,
    kinds,
    runner_pid,
    submit_stepper,
    training,
)
from tests.e2e.conftest import Platform, Shown

pytestmark = pytest.mark.chaos


def _checkpointed(attempt: int) -> Callable[[Shown], bool]:
    def check(shown: Shown) -> bool:
        return training(attempt)(shown) and any(
            event["detail"].get("attempt") == attempt for event in events(shown, "checkpoint")
        )

    return check


def _failure(shown: Shown, index: int = 0) -> dict[str, object]:
    failure = events(shown, "restart")[index]["detail"]["failure"]
    assert isinstance(failure, dict)
    return failure


def test_a_program_killed_mid_step_resumes_from_its_last_checkpoint(
    platform: Platform, tmp_path: Path
) -> None:
    steps = 100
    job = submit_stepper(platform, tmp_path, name="kill-mid-step", steps=steps)
    platform.wait_for(job, "a checkpoint of attempt 1", _checkpointed(1), 60)
    processes.kill_training(runner_pid(platform, job, 1))

    done = assert_completed_exactly(platform, job, steps, tmp_path)
    failure = _failure(done)
    assert (failure["cause"], failure["exit_code"]) == ("signal", 137), failure
    [resumed] = events(done, "resumed")
    assert resumed["detail"]["name"] == failure["checkpoint"]
    story = kinds(done)
    assert story.index("learner_exit") < story.index("restart") < story.index("resumed")
    logs = platform.dlaas("logs", job).stdout
    assert f"learner 1 resumes from checkpoint {failure['checkpoint']}" in logs
    assert "stepper: resumed from ckpt-" in logs


def _kill_while_writing(platform: Platform, job: str, attempt: int) -> str | None:
    """SIGKILL the program while its checkpoint directory holds a half-written checkpoint;
    the name of that checkpoint, or None if the write finished before the kill landed."""
    [record] = [r for r in platform.learners(job) if r["attempt"] == attempt]
    checkpoints = Path(record["workdir"]) / "program" / "checkpoints"
    program = processes.training_pid(int(record["pid"]))
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        with os.scandir(checkpoints) as entries:
            writing = [e.name for e in entries if e.name.startswith(".tmp-ckpt-")]
        if writing:
            os.kill(program, signal.SIGKILL)
            processes.wait_gone(program)
            return writing[0] if (checkpoints / writing[0]).exists() else None
        time.sleep(0.001)
    raise AssertionError(f"no checkpoint was written in {checkpoints} for 30 s")


def test_a_checkpoint_half_written_at_a_kill_is_never_restored(
    platform: Platform, tmp_path: Path
) -> None:
    steps = 200
    job = submit_stepper(
        platform, tmp_path, name="kill-mid-write", steps=steps, checkpoint_mb=16, keep=100
    )
    attempt, half_written = 1, None
    while half_written is None and attempt <= 5:
        platform.wait_for(job, f"a checkpoint of attempt {attempt}", _checkpointed(attempt), 60)
        half_written = _kill_while_writing(platform, job, attempt)
        attempt += 1
    assert half_written is not None, "every kill landed after the write had finished"
    match = re.fullmatch(r"\.tmp-ckpt-(\d+)-\d+", half_written)
    assert match, half_written

    done = assert_completed_exactly(platform, job, steps, tmp_path)
    resumed = events(done, "resumed")[attempt - 2]["detail"]
    assert resumed["attempt"] == attempt
    assert int(resumed["name"].removeprefix("ckpt-")) < int(match.group(1))
    stored = platform.home / "objects" / "jobs" / job / "checkpoints" / resumed["name"]
    assert (stored / "COMMITTED").is_file(), sorted(p.name for p in stored.parent.iterdir())


@pytest.mark.parametrize("frozen", ["learner", "program"])
def test_a_frozen_learner_is_found_by_its_silence_and_restarted(
    platform: Platform, tmp_path: Path, frozen: str
) -> None:
    steps = 100
    job = submit_stepper(
        platform, tmp_path, name=f"frozen-{frozen}", steps=steps, heartbeat_timeout_s=3
    )
    platform.wait_for(job, "a checkpoint of attempt 1", _checkpointed(1), 60)
    runner = runner_pid(platform, job, 1)
    program = processes.training_pid(runner)
    if frozen == "learner":  # runner and program, as a frozen container or node
        processes.freeze(runner)
    else:  # the program alone, as a debugger or a stray SIGSTOP would
        os.kill(program, signal.SIGSTOP)

    done = assert_completed_exactly(platform, job, steps, tmp_path)
    failure = _failure(done)
    assert failure["cause"] == "heartbeat", failure
    assert "no heartbeat for" in str(failure["reason"])
    assert events(done, "resumed")[0]["detail"]["name"] == failure["checkpoint"]
    assert not processes.alive(runner) and not processes.alive(program)


def test_ten_kills_at_random_moments_lose_nothing(platform: Platform, tmp_path: Path) -> None:
    steps, kills = 600, 10
    job = submit_stepper(
        platform, tmp_path, name="ten-kills", steps=steps, step_delay=0.01, max_restarts=12
    )
    chance = random.Random(20261122)
    for kill in range(kills):
        attempt = kill + 1
        platform.wait_for(job, f"attempt {attempt} running", training(attempt), 60, poll_s=0.1)
        running = [r for r in platform.learners(job) if r["phase"] == "Running"]
        assert {r["attempt"] for r in running} == {attempt}, running
        runner = runner_pid(platform, job, attempt)
        # Checkpoints come a second apart: kills in pairs land before the attempt's first one
        # (no progress) or after it (and maybe while the second is written), so the job
        # neither finishes early nor starts from scratch every time. "After it" waits for the
        # checkpoint itself, which a busy machine may take longer than a second to write.
        if kill // 2 % 2 == 0:
            time.sleep(chance.uniform(0.1, 0.7))
        else:
            platform.wait_for(job, f"a checkpoint of attempt {attempt}", _checkpointed(attempt), 60)
            time.sleep(chance.uniform(0.0, 0.5))
        if kill % 2:
            processes.kill_runner(runner)
        else:
            processes.kill_training(runner)

    done = assert_completed_exactly(platform, job, steps, tmp_path)
    assert done["job"]["attempt"] == kills + 1
    assert len(events(done, "restart")) == kills
    causes = {str(_failure(done, index)["cause"]) for index in range(kills)}
    assert causes == {"signal"}, causes
    restored = {event["detail"]["name"] for event in events(done, "resumed")}
    assert len(restored) >= 3, f"the job hardly progressed between kills: {restored}"


def test_a_job_whose_restarts_ran_out_fails_saying_so(platform: Platform, tmp_path: Path) -> None:
    job = submit_stepper(platform, tmp_path, name="restarts-run-out", steps=1000, max_restarts=1)
    for attempt in (1, 2):
        platform.wait_for(job, f"attempt {attempt} running", training(attempt), 60, poll_s=0.1)
        processes.kill_training(runner_pid(platform, job, attempt))

    done = finish(platform, job)
    assert done["job"]["state"] == "FAILED", done["job"]
    assert done["job"]["reason"].endswith("no restarts left (1 of 1 used)"), done["job"]
    assert "killed by SIGKILL" in done["job"]["reason"]
    assert [e["kind"] for e in done["events"] if "restart" in e["kind"]] == [
        "restart",
        "restart_refused",
    ]
    assert_no_learner_left(platform, job)


def test_a_learner_killed_while_storing_its_results_stores_them_all_on_restart(
    platform: Platform, tmp_path: Path
) -> None:
    steps, result_mb = 20, 256
    job = submit_stepper(
        platform, tmp_path, name="killed-storing", steps=steps, result_mb=result_mb
    )
    platform.wait_for(job, "STORING", lambda s: s["job"]["state"] == "STORING", 60, poll_s=0.01)
    os.kill(runner_pid(platform, job, 1), signal.SIGKILL)

    done = assert_completed_exactly(platform, job, steps, tmp_path)
    [restart] = events(done, "restart")
    assert restart["detail"]["failure"]["cause"] == "signal", restart
    assert (tmp_path / f"results-{job}" / "blob.bin").stat().st_size == result_mb << 20
