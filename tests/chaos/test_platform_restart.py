"""`dlaas down` then `dlaas up`: a job that was running resumes from its checkpoint."""

from __future__ import annotations

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
