"""Quotas: nominal, borrowing up to the limit, the cohort's idle quota, reclaim, concurrency."""

from lifecycle_manager.scheduler import WaitCause, schedule
from tests.unit.scheduler.factories import NOW, gpu_nodes, pending, running, snapshot, team


def test_a_team_borrows_idle_quota_of_another_team() -> None:
    cluster = snapshot(
        gpu_nodes(2),
        [team("a", 8, borrow=8), team("b", 8)],
        pending_jobs=[pending("a1", "a", 8), pending("a2", "a", 8, submitted=1)],
    )
    result = schedule(cluster, NOW)
    assert [(a.job_id, a.borrowed) for a in result.admissions] == [("a1", False), ("a2", True)]


def test_the_borrowing_limit_stops_a_team_and_says_so() -> None:
    cluster = snapshot(
        gpu_nodes(3),
        [team("vision", 8, borrow=1), team("nlp", 16)],
        [running("v1", "vision", "a100-0", gpus=6)],
        [pending("v2", "vision", 4)],
    )
    (waiting,) = schedule(cluster, NOW).waiting
    assert waiting.cause is WaitCause.TEAM_QUOTA
    assert waiting.reason == (
        "needs 4 GPUs (A100); team vision has 2 of its 8 free, borrowing limit reached "
        "(0 of 1 borrowed)"
    )


def test_a_team_without_borrowing_stays_within_its_nominal_quota() -> None:
    cluster = snapshot(
        gpu_nodes(2),
        [team("a", 8), team("b", 8)],
        [running("a1", "a", "a100-0", gpus=8)],
        [pending("a2", "a", 1)],
    )
    (waiting,) = schedule(cluster, NOW).waiting
    assert waiting.reason == "needs 1 GPU (A100); team a has 0 of its 8 free, and it may not borrow"


def test_nothing_is_borrowed_that_no_team_left_idle() -> None:
    cluster = snapshot(
        gpu_nodes(3),
        [team("a", 8, borrow=8), team("b", 8)],
        [running("a1", "a", "a100-0", gpus=8), running("b1", "b", "a100-1", gpus=8)],
        [pending("a2", "a", 1)],
    )
    result = schedule(cluster, NOW)
    assert not result.admissions
    (waiting,) = result.waiting
    assert waiting.cause is WaitCause.NO_IDLE_QUOTA
    assert waiting.reason.endswith("other teams have no idle A100 GPU quota to lend")


def test_concurrent_jobs_are_a_quota_too() -> None:
    cluster = snapshot(
        gpu_nodes(1),
        [team("a", 8, jobs=3)],
        [running(f"a{i}", "a", "a100-0") for i in range(3)],
        [pending("a4", "a", 1)],
    )
    (waiting,) = schedule(cluster, NOW).waiting
    assert waiting.reason == "team a has 3 of its 3 concurrent jobs running"


def test_an_owner_reclaims_borrowed_quota_by_preemption_then_waits_for_it() -> None:
    teams = [team("a", 8, borrow=8), team("b", 8)]
    a_jobs = [
        running("a1", "a", "a100-0", gpus=8, checkpoint=NOW - 300),
        running("a2", "a", "a100-1", gpus=8, checkpoint=NOW - 30),
    ]
    cluster = snapshot(gpu_nodes(2), teams, a_jobs, [pending("b1", "b", 8)])
    result = schedule(cluster, NOW)
    (preemption,) = result.preemptions
    assert (preemption.victim_id, preemption.for_job_id) == ("a2", "b1")
    assert "team b reclaims its own quota" in preemption.reason
    assert result.waiting[0].cause is WaitCause.PREEMPTING

    # while the victim checkpoints, the next pass waits for it and preempts nobody else
    stopping = [a_jobs[0], running("a2", "a", "a100-1", gpus=8, stopping=True)]
    again = schedule(snapshot(gpu_nodes(2), teams, stopping, [pending("b1", "b", 8)]), NOW + 5)
    assert not again.preemptions
    assert again.waiting[0].reason == (
        "waiting for a2 to checkpoint and stop; its room goes to this job"
    )

    gone = schedule(snapshot(gpu_nodes(2), teams, [a_jobs[0]], [pending("b1", "b", 8)]), NOW + 60)
    assert [a.job_id for a in gone.admissions] == ["b1"]


def test_a_job_larger_than_its_team_may_ever_use_is_refused() -> None:
    cluster = snapshot(
        gpu_nodes(4), [team("a", 8, borrow=4)], pending_jobs=[pending("a1", "a", 8, 2)]
    )
    (refusal,) = schedule(cluster, NOW).refusals
    assert refusal.field == "gpus"
    assert "12: its nominal quota plus borrowing limit" in refusal.reason
