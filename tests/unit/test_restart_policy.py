from lifecycle_manager.decisions.job_progress import Action, Decision
from lifecycle_manager.decisions.restart_policy import (
    Cause,
    Failure,
    RestartPolicy,
    RestartScope,
    classify,
    decide_restart,
    learners_to_restart,
    with_restart_policy,
    without_attempt_details,
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
    killed = Failure(1, Cause.SIGNAL, "killed", 137, signal="SIGKILL")
    assert Failure.from_detail(killed.to_detail()) == killed
    assert Failure.from_detail({"learner": 1, "cause": "exit"}).signal is None  # older events


def test_interruptions_resume_without_using_restarts() -> None:
    none_left = RestartPolicy(max_restarts=0)
    verdict = decide_restart(none_left, failure(Cause.INTERRUPTED, "ckpt-3"), [])
    assert verdict.restart
    assert verdict.reason.endswith("resuming from ckpt-3 (an interruption uses no restart)")
    interrupted = [failure(Cause.INTERRUPTED, f"ckpt-{i}") for i in range(5)]
    after = decide_restart(POLICY, failure(Cause.SIGNAL, "ckpt-9"), interrupted)
    assert after.reason.endswith("restart 1 of 3 from ckpt-9")


def test_the_cluster_saying_oomkilled_is_what_makes_an_oom() -> None:
    assert classify(137, None, oom_killed=True) is Cause.OOM
    assert classify(None, None, oom_killed=True) is Cause.OOM
    assert classify(1, None, oom_killed=True) is Cause.OOM  # the reason outweighs the code
    # The cluster says it was not: a 137 is a SIGKILL from someone else.
    assert classify(137, None, oom_killed=False) is Cause.SIGNAL
    assert classify(1, None, oom_killed=False) is Cause.EXIT
    # No word from the cluster (the local backend): 137 is likely out of memory.
    assert classify(137, None, oom_killed=None) is Cause.OOM


def test_listed_exit_codes_fail_the_job_at_once() -> None:
    policy = RestartPolicy(max_restarts=5, fail_on_exit_codes=frozenset({2}))
    verdict = decide_restart(policy, failure(Cause.EXIT), [])
    assert verdict.restart  # exit code 1 is not listed
    bad_argument = Failure(1, Cause.EXIT, "learner 1 failed: exit code 2", 2)
    refused = decide_restart(policy, bad_argument, [])
    assert not refused.restart
    assert "exit code 2 is one of restart_policy.fail_on_exit_codes" in refused.reason
    assert refused.reason.startswith("learner 1 failed: exit code 2")


def test_listed_exit_codes_apply_whatever_ended_the_program_but_an_interruption() -> None:
    policy = RestartPolicy(fail_on_exit_codes=frozenset({137, 143}))
    assert not decide_restart(policy, Failure(1, Cause.SIGNAL, "killed", 137), []).restart
    assert not decide_restart(policy, Failure(1, Cause.OOM, "oom", 137), []).restart
    # The platform stopped it while the job should run: that is no exit of the program's.
    assert decide_restart(policy, Failure(1, Cause.INTERRUPTED, "stopped", 143), []).restart


def test_the_policy_reads_scope_and_exit_codes_from_the_manifest() -> None:
    manifest = {"restart_policy": {"scope": "learner", "fail_on_exit_codes": [2, 3]}}
    policy = RestartPolicy.from_manifest(manifest)
    assert policy.scope is RestartScope.LEARNER
    assert policy.fail_on_exit_codes == frozenset({2, 3})
    assert RestartPolicy().scope is RestartScope.GANG
    assert RestartPolicy().fail_on_exit_codes == frozenset()


def test_a_learner_scope_restart_stops_only_the_failed_learner() -> None:
    failed = Decision(
        JobState.FAILED, "learner 2 failed: killed", (Action.STOP_LEARNERS,), failed_learner=2
    )
    policy = RestartPolicy(scope=RestartScope.LEARNER)
    decision, verdict = with_restart_policy(failed, policy, failure(Cause.SIGNAL, "ckpt-1"), [])
    assert verdict.restart
    assert decision.target is JobState.RECOVERING
    assert decision.actions == (Action.STOP_FAILED_LEARNER, Action.RESTART)
    assert decision.failed_learner == 2
    refused, _ = with_restart_policy(
        failed, RestartPolicy(max_restarts=0, scope=RestartScope.LEARNER), failure(), []
    )
    assert refused.target is JobState.FAILED
    assert refused.actions == (Action.STOP_LEARNERS,)  # a failed job stops every learner


def test_a_restart_recreates_the_gang_or_the_failed_learner() -> None:
    assert learners_to_restart(RestartScope.GANG, 2, 3) == (1, 2, 3)
    assert learners_to_restart(RestartScope.LEARNER, 2, 3) == (2,)
    assert learners_to_restart(RestartScope.LEARNER, None, 2) == (1, 2)  # nobody named


def test_restart_counting_and_backoff_are_per_job_whichever_learner_failed() -> None:
    policy = RestartPolicy(max_restarts=2, scope=RestartScope.LEARNER)
    history = [
        Failure(1, Cause.SIGNAL, "killed", 137, checkpoint="learner-1/ckpt-1"),
        Failure(2, Cause.SIGNAL, "killed", 137, checkpoint="learner-2/ckpt-1"),
    ]
    third = Failure(1, Cause.SIGNAL, "killed", 137, checkpoint="learner-1/ckpt-2")
    assert not decide_restart(policy, third, history).restart
    # Each learner's checkpoints are its own progress: no backoff across learners.
    stalled = RestartPolicy(max_restarts=9, backoff_s=1.0, scope=RestartScope.LEARNER)
    assert decide_restart(stalled, third, history).delay_s == 0.0


def test_the_same_error_under_each_attempts_own_directory_is_the_same_failure() -> None:
    missing = "FileNotFoundError: [Errno 2] No such file or directory: '{}'"
    path = "/home/u/.dlaas/agent/jobs/training-x/learner-1/a{}/data/digits.npz"
    first = failure(line=missing.format(path.format(1)))
    again = failure(line=missing.format(path.format(2)))
    verdict = decide_restart(POLICY, again, [first])
    assert not verdict.restart
    assert "same failure happened 2 times" in verdict.reason


def test_addresses_pids_temporary_names_and_times_do_not_tell_failures_apart() -> None:
    pairs = [
        ("<Tensor object at 0x7f3a2c1d0e50>", "<Tensor object at 0x7f11aa0b9e10>"),
        ("worker pid 4711 exited", "worker pid 5102 exited"),
        ("cannot open /tmp/tmpk3j_x9q1/shard", "cannot open /tmp/tmpz0a8_m2c/shard"),
        ("2026-11-24 12:00:03,123 ERROR boom", "2026-11-24 12:00:09,987 ERROR boom"),
        ("pod dlaas-training-x-learner-2-a1 lost", "pod dlaas-training-x-learner-2-a2 lost"),
    ]
    for one, other in pairs:
        assert failure(line=other).repeats(failure(line=one)), (one, other)


def test_what_tells_errors_apart_is_kept() -> None:
    assert without_attempt_details("step 12 loss nan") == "step 12 loss nan"
    learner_1 = failure(line="error in /jobs/training-x/learner-1/a1/model/train.py")
    learner_2 = failure(line="error in /jobs/training-x/learner-2/a2/model/train.py")
    assert not learner_2.repeats(learner_1)
