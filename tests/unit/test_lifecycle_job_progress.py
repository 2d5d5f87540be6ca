import itertools

import pytest

from lifecycle_manager.decisions.job_progress import (
    NO_CHANGE,
    Action,
    ClusterLearner,
    Decision,
    JobView,
    LearnerView,
    Observation,
    decide,
    describe_exit,
    learner_after_exit,
    learner_after_status,
    observe_cluster,
)
from storage.job_states import Desired, JobState, LearnerState, can_transition

L = LearnerState


def job(
    state: JobState, *learners: LearnerState | LearnerView, desired: Desired = Desired.RUN
) -> JobView:
    views = [
        item if isinstance(item, LearnerView) else LearnerView(index, item)
        for index, item in enumerate(learners, start=1)
    ]
    return JobView(state, desired, views)


@pytest.mark.parametrize(
    ("state", "learners", "target"),
    [
        (JobState.DEPLOYING, (L.PENDING, L.PENDING), None),
        (JobState.DEPLOYING, (L.DOWNLOADING, L.PENDING), JobState.DOWNLOADING),
        (JobState.DEPLOYING, (L.RUNNING, L.PENDING), JobState.DOWNLOADING),
        (JobState.DEPLOYING, (L.RUNNING, L.RUNNING), JobState.RUNNING),
        (JobState.DOWNLOADING, (L.RUNNING, L.DOWNLOADING), None),
        (JobState.DOWNLOADING, (L.RUNNING, L.RUNNING), JobState.RUNNING),
        (JobState.RUNNING, (L.STORING, L.RUNNING), None),
        (JobState.RUNNING, (L.STORING, L.SUCCEEDED), JobState.STORING),
        (JobState.DEPLOYING, (L.STORING,), JobState.STORING),
        (JobState.STORING, (L.RUNNING, L.STORING), None),  # never backwards
    ],
)
def test_the_job_follows_its_slowest_learner(
    state: JobState, learners: tuple[LearnerState, ...], target: JobState | None
) -> None:
    decision = decide(job(state, *learners))
    assert decision.target == target
    if target is not None:
        assert can_transition(state, target)
        assert decision.actions == ()


def test_every_learner_exiting_zero_completes_the_job() -> None:
    decision = decide(job(JobState.RUNNING, L.SUCCEEDED, L.SUCCEEDED))
    assert decision == Decision(
        JobState.COMPLETED, "training finished: 2 learners exited 0", (Action.STOP_LEARNERS,)
    )


@pytest.mark.parametrize("state", [JobState.DEPLOYING, JobState.DOWNLOADING])
def test_learners_finishing_before_their_progress_was_seen_pass_through_running(
    state: JobState,
) -> None:
    decision = decide(job(state, L.SUCCEEDED))
    assert (decision.via, decision.target) == ((JobState.RUNNING,), JobState.COMPLETED)
    path = [state, *decision.via, JobState.COMPLETED]
    assert all(can_transition(a, b) for a, b in itertools.pairwise(path))


def test_one_learner_succeeding_is_not_enough() -> None:
    assert decide(job(JobState.RUNNING, L.SUCCEEDED, L.RUNNING)) == NO_CHANGE


def test_a_failed_learner_fails_the_job_naming_it_and_the_cause() -> None:
    failed = LearnerView(2, L.FAILED, 137, "exit code 137 (likely out of memory)")
    decision = decide(job(JobState.RUNNING, L.RUNNING, failed))
    assert decision.target is JobState.FAILED
    assert decision.reason == "learner 2 failed: exit code 137 (likely out of memory)"
    assert decision.actions == (Action.STOP_LEARNERS,)


def test_a_failure_wins_over_successes() -> None:
    failed = LearnerView(1, L.FAILED, 1, "exit code 1")
    assert decide(job(JobState.STORING, failed, L.SUCCEEDED)).target is JobState.FAILED


@pytest.mark.parametrize(
    "state", [JobState.QUEUED, JobState.HALTED, JobState.COMPLETED, JobState.FAILED]
)
def test_jobs_not_running_do_not_move(state: JobState) -> None:
    assert decide(job(state, L.FAILED)) == NO_CHANGE
    assert decide(job(state, L.SUCCEEDED)) == NO_CHANGE


def test_a_halt_completes_when_every_learner_is_finished() -> None:
    halting = job(JobState.RUNNING, L.STOPPED, L.STOPPING, desired=Desired.HALT)
    assert decide(halting) == NO_CHANGE
    halted = job(JobState.RUNNING, L.STOPPED, L.SUCCEEDED, desired=Desired.HALT)
    assert decide(halted) == Decision(JobState.HALTED, "halted by user", (Action.STOP_LEARNERS,))


def test_a_deleted_job_is_left_to_the_delete() -> None:
    assert decide(job(JobState.RUNNING, L.FAILED, desired=Desired.DELETE)) == NO_CHANGE


def test_a_resumed_halt_is_left_to_the_resume() -> None:
    assert decide(job(JobState.RUNNING, L.STOPPED, L.STOPPING)) == NO_CHANGE


@pytest.mark.parametrize(
    ("code", "signal", "reason"),
    [
        (0, None, "exit code 0"),
        (3, None, "exit code 3"),
        (137, None, "exit code 137 (likely out of memory)"),
        (143, None, "exit code 143 (killed by SIGTERM)"),
        (None, "SIGKILL", "killed by SIGKILL"),
        (None, None, "exit status unknown"),
    ],
)
def test_exits_are_described_for_people(code: int | None, signal: str | None, reason: str) -> None:
    assert describe_exit(code, signal) == reason


def test_exit_zero_succeeds_anything_else_fails() -> None:
    assert learner_after_exit(L.RUNNING, Desired.RUN, 0, None) == (L.SUCCEEDED, "exit code 0")
    assert learner_after_exit(L.RUNNING, Desired.RUN, 2, None) == (L.FAILED, "exit code 2")
    assert learner_after_exit(L.RUNNING, Desired.RUN, None, "SIGSEGV") == (
        L.FAILED,
        "killed by SIGSEGV",
    )
    assert learner_after_exit(L.STORING, Desired.RUN, 1, None, "could not upload results") == (
        L.FAILED,
        "could not upload results",
    )


@pytest.mark.parametrize(
    ("previous", "desired", "stopped"),
    [
        (L.RUNNING, Desired.HALT, False),
        (L.RUNNING, Desired.DELETE, False),
        (L.STOPPING, Desired.RUN, False),
        (L.RUNNING, Desired.RUN, True),
    ],
)
def test_exits_the_lifecycle_manager_caused_are_stops_not_failures(
    previous: LearnerState, desired: Desired, stopped: bool
) -> None:
    state, reason = learner_after_exit(previous, desired, None, "SIGTERM", stopped=stopped)
    assert state is L.STOPPED
    assert reason == "killed by SIGTERM"


def test_status_reports_only_move_forward() -> None:
    assert learner_after_status(L.PENDING, L.DOWNLOADING) is L.DOWNLOADING
    assert learner_after_status(L.PENDING, L.RUNNING) is L.RUNNING
    assert learner_after_status(L.RUNNING, L.DOWNLOADING) is None
    assert learner_after_status(L.RUNNING, L.RUNNING) is None
    assert learner_after_status(L.SUCCEEDED, L.STORING) is None
    assert learner_after_status(L.STOPPING, L.RUNNING) is None
    assert learner_after_status(L.PENDING, L.FAILED) is None  # not a status a runner sends


def test_the_cluster_view_finds_missed_exits_and_lost_learners() -> None:
    running = job(JobState.RUNNING, L.RUNNING, L.RUNNING, L.SUCCEEDED)
    cluster = [ClusterLearner(1, finished=True, exit_code=1, reason="exit code 1")]
    seen = observe_cluster(running, cluster, age=100, grace=15)
    assert seen.exits == (cluster[0],)
    assert seen.vanished == (2,)
    assert seen.not_created == ()


def test_every_learner_lost_is_seen_vanished() -> None:
    running = job(JobState.RUNNING, L.RUNNING, L.RUNNING)
    seen = observe_cluster(running, [], age=0, grace=15)
    assert seen.vanished == (1, 2)


def test_a_deploying_job_gets_a_grace_then_a_redeploy() -> None:
    deploying = job(JobState.DEPLOYING, L.PENDING, L.PENDING)
    present = [ClusterLearner(1, finished=False)]
    assert observe_cluster(deploying, present, age=3, grace=15).not_created == ()
    late = observe_cluster(deploying, present, age=20, grace=15)
    assert late.not_created == (2,)
    assert late.vanished == ()
    sooner = observe_cluster(deploying, present, age=6, grace=15, redeploy_after=5)
    assert sooner.not_created == (2,)  # its worker died mid-deploy: no need to wait 15 s


def test_a_learner_that_never_reported_in_a_later_state_is_lost_after_the_grace() -> None:
    downloading = job(JobState.DOWNLOADING, L.DOWNLOADING, L.PENDING)
    present = [ClusterLearner(1, finished=False)]
    assert observe_cluster(downloading, present, age=3, grace=15).vanished == ()
    assert observe_cluster(downloading, present, age=20, grace=15).vanished == (2,)


@pytest.mark.parametrize("desired", [Desired.HALT, Desired.DELETE])
def test_the_cluster_view_leaves_halts_and_deletes_alone(desired: Desired) -> None:
    halting = job(JobState.RUNNING, L.RUNNING, desired=desired)
    assert observe_cluster(halting, [], age=100, grace=15) == Observation()


def test_stopping_and_finished_learners_are_not_lost() -> None:
    ending = job(JobState.RUNNING, L.STOPPING, L.SUCCEEDED, L.FAILED)
    seen = observe_cluster(ending, [], age=100, grace=15)
    assert seen.vanished == ()


def test_a_job_whose_one_learner_is_created_again_returns_to_running_with_it() -> None:
    # Scope `learner`: learner 1 ran on while learner 2 was replaced.
    assert decide(job(JobState.DEPLOYING, L.RUNNING, L.PENDING)).target is JobState.DOWNLOADING
    assert decide(job(JobState.DOWNLOADING, L.RUNNING, L.RUNNING)).target is JobState.RUNNING
    # A learner that finished while the other was replaced stays finished.
    assert decide(job(JobState.DOWNLOADING, L.SUCCEEDED, L.RUNNING)).target is JobState.RUNNING
    done = decide(job(JobState.RUNNING, L.SUCCEEDED, L.SUCCEEDED))
    assert done.target is JobState.COMPLETED
