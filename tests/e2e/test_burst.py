"""A burst of 20 short jobs submitted at once: every job reaches the final state its plan
expects, with its events consistent and recorded once (`tests/e2e/burst.py` has the plans).
`bench/soak.py` puts 1000 of the same jobs through the platform.
"""

from __future__ import annotations

import statistics
from pathlib import Path

import pytest

from storage.job_states import JobState
from tests.e2e.burst import (
    drive,
    evidence,
    learners_left_running,
    outcomes_of,
    plan_mix,
    progress_line,
)
from tests.e2e.conftest import Platform

pytestmark = pytest.mark.e2e

BURST_JOBS = 20  # one of each plan in `MIX`'s proportions; bench/soak.py puts 1000 through


def test_a_burst_of_short_jobs_ends_each_in_the_state_its_plan_expects(
    platform: Platform, tmp_path: Path
) -> None:
    plans = plan_mix(BURST_JOBS, seed=1)
    assert sum(plan.expected_state is JobState.FAILED for plan in plans) == BURST_JOBS // 5
    # Waits for every job to be final; gives up only once none became final for 2 minutes.
    run = drive(platform, plans, tmp_path, on_progress=lambda run: print(progress_line(run)))
    outcomes = outcomes_of(platform, run)
    print(progress_line(run))
    waits = [o.finish_to_final_s for o in outcomes if o.finish_to_final_s is not None]
    if waits:
        print(
            f"last learner's end -> final state over {len(waits)} jobs: "
            f"median {statistics.median(waits):.1f} s, max {max(waits):.1f} s"
        )
    report = f"{evidence([o for o in outcomes if o.wrong])}\n{platform.service_logs()}"

    assert not run.api_errors, run.api_errors
    unfinished = [job.job_id for job in run.unfinished]
    assert not unfinished, f"{len(unfinished)} jobs never became final: {unfinished}\n{report}"
    assert len(outcomes) == BURST_JOBS
    wrong = [o.job.job_id for o in outcomes if o.wrong_final_state]
    assert not wrong, f"jobs ended in a state their plan does not expect: {wrong}\n{report}"
    duplicated = [o.job.job_id for o in outcomes if o.duplicates]
    assert not duplicated, f"jobs with events recorded twice: {duplicated}\n{report}"
    inconsistent = [o.job.job_id for o in outcomes if o.problems]
    assert not inconsistent, f"jobs whose records do not hold together: {inconsistent}\n{report}"
    left = learners_left_running(platform, [job.job_id for job in run.jobs])
    assert not left, f"learners of final jobs still running: {left}"
