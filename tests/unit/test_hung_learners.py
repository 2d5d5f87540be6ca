from lifecycle_manager.decisions.hung_learners import LearnerBeat, silent_learners
from storage.job_states import LearnerState as L


def test_a_learner_silent_past_the_timeout_is_hung() -> None:
    learners = [LearnerBeat(1, L.RUNNING, 0.0), LearnerBeat(2, L.RUNNING, 0.0)]
    beats = {1: 95.0, 2: 70.0}
    assert silent_learners(learners, beats, now=100.0, timeout_s=10.0) == {2: 30.0}


def test_a_learner_that_never_beat_is_timed_from_its_last_change() -> None:
    learners = [LearnerBeat(1, L.DOWNLOADING, 95.0), LearnerBeat(2, L.RUNNING, 50.0)]
    assert silent_learners(learners, {}, now=100.0, timeout_s=10.0) == {2: 50.0}


def test_learners_not_running_are_not_watched() -> None:
    learners = [
        LearnerBeat(1, L.PENDING, 0.0),
        LearnerBeat(2, L.SUCCEEDED, 0.0),
        LearnerBeat(3, L.STOPPING, 0.0),
        LearnerBeat(4, L.FAILED, 0.0),
    ]
    assert silent_learners(learners, {}, now=100.0, timeout_s=10.0) == {}


def test_silence_counts_from_when_redis_answered_again() -> None:
    learners = [LearnerBeat(1, L.RUNNING, 0.0)]
    beats = {1: 80.0}  # the last beat before Redis went down
    assert silent_learners(learners, beats, now=100.0, timeout_s=10.0, listening_since=95.0) == {}
    assert silent_learners(learners, beats, now=106.0, timeout_s=10.0, listening_since=95.0) == {
        1: 11.0
    }
