import pytest

from storage.job_states import (
    FINAL_STATES,
    TRANSITIONS,
    IllegalTransition,
    JobState,
    can_transition,
    check_transition,
    predecessors,
)


def test_final_states_are_completed_failed_and_deleted() -> None:
    assert {JobState.COMPLETED, JobState.FAILED, JobState.DELETED} == FINAL_STATES


def test_every_state_but_deleted_can_be_deleted_and_deleted_leads_nowhere() -> None:
    for state in JobState:
        assert can_transition(state, JobState.DELETED) == (state is not JobState.DELETED)
    assert not TRANSITIONS[JobState.DELETED]


def test_every_state_has_a_row() -> None:
    assert set(TRANSITIONS) == set(JobState)


@pytest.mark.parametrize(
    ("current", "target"),
    [
        (JobState.QUEUED, JobState.DEPLOYING),
        (JobState.DEPLOYING, JobState.DOWNLOADING),
        (JobState.DOWNLOADING, JobState.RUNNING),
        (JobState.RUNNING, JobState.STORING),
        (JobState.STORING, JobState.COMPLETED),
        (JobState.RUNNING, JobState.RECOVERING),
        (JobState.RECOVERING, JobState.DEPLOYING),
        (JobState.RUNNING, JobState.HALTED),
        (JobState.HALTED, JobState.QUEUED),
        (JobState.RUNNING, JobState.QUEUED),  # preempted
    ],
)
def test_the_normal_paths_are_allowed(current: JobState, target: JobState) -> None:
    check_transition(current, target)


@pytest.mark.parametrize(
    ("current", "target"),
    [
        (JobState.COMPLETED, JobState.RUNNING),
        (JobState.FAILED, JobState.QUEUED),
        (JobState.QUEUED, JobState.COMPLETED),
        (JobState.HALTED, JobState.RUNNING),
        (JobState.STORING, JobState.RUNNING),
    ],
)
def test_illegal_transitions_are_refused(current: JobState, target: JobState) -> None:
    assert not can_transition(current, target)
    with pytest.raises(IllegalTransition, match=f"from {current} to {target}"):
        check_transition(current, target)


def test_predecessors_invert_the_table() -> None:
    for target in JobState:
        for current in JobState:
            assert (current in predecessors(target)) == can_transition(current, target)


def test_every_non_final_state_can_fail_and_a_final_state_can_only_be_deleted() -> None:
    for state in JobState:
        if state in FINAL_STATES:
            assert TRANSITIONS[state] <= {JobState.DELETED}
        else:
            assert can_transition(state, JobState.FAILED)
