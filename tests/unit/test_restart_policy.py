from lifecycle_manager.job_progress import Action, Decision
from lifecycle_manager.restart_policy import (
    Cause,
    Failure,
    RestartPolicy,
    classify,
    decide_restart,
    with_restart_policy,
)
from storage.job_states import JobState

POLICY = RestartPolicy(max_restarts=3, backoff_s=1.0, backoff_max_s=5.0, identical_failures=2)


def failure(cause: Cause = Cause.EXIT, checkpoint: str | None = None, line: str = "") -> Failure:
    return Failure(1, cause, "learner 1 failed: boom", 1, last_line=line, checkpoint=checkpoint)


def test_the_first_failure_restarts_at_once_from_the_newest_checkpoint() -> None:
    verdict = decide_restart(POLICY, failure(Cause.SIGNAL, "ckpt-000000000010"), [])
    assert verdict.restart
    assert verdict.delay_s == 0.0
    assert verdict.reason.endswith("restart 1 of 3 from ckpt-000000000010")


def test_restarts_run_out() -> None:
    history = [failure(Cause.SIGNAL, f"ckpt-{i}") for i in range(3)]
    verdict = decide_restart(POLICY, failure(Cause.SIGNAL, "ckpt-9"), history)
    assert not verdict.restart
    assert "no restarts left (3 of 3 used)" in verdict.reason


def test_the_same_program_error_twice_without_progress_fails_the_job() -> None:
    error = failure(line="SyntaxError: invalid syntax")
    verdict = decide_restart(POLICY, error, [error])
    assert not verdict.restart
    assert "same failure happened 2 times" in verdict.reason
    assert "fix it" in verdict.reason


def test_a_repeated_error_after_progress_is_not_the_same_failure() -> None:
    first = failure(line="RuntimeError: NaN", checkpoint="ckpt-1")
    again = failure(line="RuntimeError: NaN", checkpoint="ckpt-2")
    assert decide_restart(POLICY, again, [first]).restart


def test_different_last_lines_are_different_failures() -> None:
    first = failure(line="RuntimeError: a")
    assert decide_restart(POLICY, failure(line="RuntimeError: b"), [first]).restart


def test_machine_failures_never_count_as_the_programs_error() -> None:
    for cause in (Cause.SIGNAL, Cause.OOM, Cause.HEARTBEAT, Cause.VANISHED):
        assert decide_restart(POLICY, failure(cause), [failure(cause)]).restart


def test_backoff_grows_only_over_failures_without_progress() -> None:
    stalled = [failure(Cause.SIGNAL, "ckpt-1"), failure(Cause.SIGNAL, "ckpt-1")]
    verdict = decide_restart(
        RestartPolicy(max_restarts=10, backoff_s=1.0, backoff_max_s=5.0),
        failure(Cause.SIGNAL, "ckpt-1"),
        stalled,
    )
    assert verdict.delay_s == 2.0  # third failure in a row on the same checkpoint
    long_stall = [failure(Cause.SIGNAL, "ckpt-1")] * 6
    capped = decide_restart(
        RestartPolicy(max_restarts=10, backoff_s=1.0, backoff_max_s=5.0),
        failure(Cause.SIGNAL, "ckpt-1"),
        long_stall,
    )
    assert capped.delay_s == 5.0
    progressed = decide_restart(POLICY, failure(Cause.SIGNAL, "ckpt-2"), stalled)
    assert progressed.delay_s == 0.0


def test_classify_tells_the_causes_apart() -> None:
    assert classify(1, None) is Cause.EXIT
    assert classify(137, None) is Cause.OOM
    assert classify(137, "SIGKILL") is Cause.SIGNAL
    assert classify(None, "SIGKILL") is Cause.SIGNAL
    assert classify(143, None) is Cause.SIGNAL
    assert classify(None, None, vanished=True) is Cause.VANISHED
    assert classify(None, None) is Cause.VANISHED  # ended unseen: the exit status is lost


def test_the_policy_reads_the_manifest_block() -> None:
    manifest = {"restart_policy": {"max_restarts": 7, "heartbeat_timeout_s": 4.0, "other": 1}}
    policy = RestartPolicy.from_manifest(manifest)
    assert policy.max_restarts == 7
    assert policy.heartbeat_timeout_s == 4.0
    assert RestartPolicy.from_manifest({}) == RestartPolicy()


def test_a_failed_decision_becomes_recovering_with_a_restart() -> None:
    failed = Decision(
        JobState.FAILED, "learner 2 failed: killed", (Action.STOP_LEARNERS,), failed_learner=2
    )
    decision, verdict = with_restart_policy(failed, POLICY, failure(Cause.SIGNAL), [])
    assert verdict.restart
    assert decision.target is JobState.RECOVERING
    assert decision.actions == (Action.STOP_LEARNERS, Action.RESTART)
    refused, _ = with_restart_policy(
        failed, RestartPolicy(max_restarts=0), failure(Cause.SIGNAL), []
    )
    assert refused.target is JobState.FAILED
    assert "no restarts left" in refused.reason


def test_failures_round_trip_through_event_details() -> None:
    original = Failure(3, Cause.HEARTBEAT, "hung", None, "last", "ckpt-000000000004")
    assert Failure.from_detail(original.to_detail()) == original


def test_interruptions_resume_without_using_restarts() -> None:
    none_left = RestartPolicy(max_restarts=0)
    verdict = decide_restart(none_left, failure(Cause.INTERRUPTED, "ckpt-3"), [])
    assert verdict.restart
    assert verdict.reason.endswith("resuming from ckpt-3 (an interruption uses no restart)")
    interrupted = [failure(Cause.INTERRUPTED, f"ckpt-{i}") for i in range(5)]
    after = decide_restart(POLICY, failure(Cause.SIGNAL, "ckpt-9"), interrupted)
    assert after.reason.endswith("restart 1 of 3 from ckpt-9")
