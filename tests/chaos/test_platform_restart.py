"""`dlaas down` then `dlaas up`: a job that was running resumes from its checkpoint."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from tests.chaos.jobs import assert_completed_exactly, events, submit_stepper
from tests.e2e.conftest import Platform

pytestmark = pytest.mark.chaos


def test_a_job_running_when_the_platform_went_down_resumes_when_it_is_up(
    platform: Platform, tmp_path: Path
) -> None:
    steps = 200
    job = submit_stepper(platform, tmp_path, name="down-up", steps=steps, max_restarts=0)
    platform.wait_for(job, "a checkpoint", lambda s: bool(events(s, "checkpoint")), 60)
    platform.dlaas("down", timeout=90)
    platform.up_again()

    done = assert_completed_exactly(platform, job, steps, tmp_path)
    [resumed] = events(done, "resumed")
    assert resumed["detail"]["attempt"] == 2


def _wait_for_log_line(platform: Platform, job: str, text: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while text not in platform.dlaas("logs", job, check=False).stdout:
        assert time.monotonic() < deadline, f"{text!r} not logged in {timeout_s} s"
        time.sleep(0.5)


def _step_logged(log: str, pattern: str) -> int:
    found = [int(step) for step in re.findall(pattern, log)]
    notes = [line for line in log.splitlines() if not line.startswith("step ")]
    assert len(found) == 1, f"{pattern!r} logged {len(found)} times: {notes}"
    return found[0]


def test_dlaas_down_keeps_the_stop_checkpoint_of_a_running_job(
    platform: Platform, tmp_path: Path
) -> None:
    """The learners stop, and their checkpoints are taken, while the API that stores them
    still runs: the job resumes at the very step it stopped at."""
    steps = 400
    job = submit_stepper(
        platform,
        tmp_path,
        name="down-stop-checkpoint",
        steps=steps,
        max_restarts=0,
        term_grace=0.5,
        checkpoint_on_term=True,
        interval_s=3600,  # no checkpoint but the one taken at the stop
    )
    platform.wait_for(job, "training", lambda s: s["job"]["state"] == "RUNNING", 90)
    _wait_for_log_line(platform, job, "step 20 digest", 90)
    down = platform.dlaas("down", timeout=120)
    assert "stopped the learners of" in down.stderr + down.stdout
    platform.up_again()

    done = assert_completed_exactly(platform, job, steps, tmp_path)
    assert not events(done, "checkpoint_failed"), events(done, "checkpoint_failed")
    log = platform.dlaas("logs", job).stdout
    stopped = _step_logged(log, r"stepper: stopping at step (\d+) on SIGTERM")
    resumed = _step_logged(log, r"stepper: resumed from \S+ at step (\d+)")
    assert resumed == stopped, f"{stopped - resumed} steps lost"
