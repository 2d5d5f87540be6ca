"""Victims: borrowed quota of other teams first, then lowest priority, then least work lost;
as few as free enough; never a job another team runs within its own quota."""

from lifecycle_manager.scheduler import RunningJob, SchedulePass, Team, WaitCause, schedule
from tests.unit.scheduler.factories import NOW, gpu_nodes, pending, running, snapshot, team


def reclaim(
    teams: list[Team], jobs: list[RunningJob], nodes: int = 2, gpus: int = 8
) -> SchedulePass:
    cluster = snapshot(gpu_nodes(nodes), teams, jobs, [pending("mine", "owner", gpus)])
    return schedule(cluster, NOW)


def victims(result: SchedulePass) -> list[str]:
    return [p.victim_id for p in result.preemptions]


def test_borrowed_jobs_go_before_jobs_within_their_teams_quota() -> None:
    teams = [team("borrower", 8, borrow=8), team("low", 8), team("owner", 8)]
    jobs = [
        running("b1", "borrower", "a100-0", gpus=8, priority=5),
        running("b2", "borrower", "a100-1", gpus=8, priority=5),
        running("l1", "low", "a100-2", gpus=8, priority=0),
    ]
    result = reclaim(teams, jobs, nodes=3)
    assert len(victims(result)) == 1 and victims(result)[0].startswith("b")
    assert result.preemptions[0].reason == (
        "team borrower is borrowing A100 GPUs beyond its nominal quota; "
        "team owner reclaims its own quota for job mine"
    )


def test_the_lowest_priority_borrowed_job_goes_first() -> None:
    teams = [team("borrower", 0, borrow=16), team("owner", 16)]
    jobs = [
        running("high", "borrower", "a100-0", gpus=8, priority=3),
        running("low", "borrower", "a100-1", gpus=8, priority=1),
    ]
    assert victims(reclaim(teams, jobs)) == ["low"]


def test_among_equals_the_job_that_loses_least_work_goes() -> None:
    teams = [team("borrower", 0, borrow=16), team("owner", 16)]
    jobs = [
        running("stale", "borrower", "a100-0", gpus=8, checkpoint=NOW - 3000),
        running("fresh", "borrower", "a100-1", gpus=8, checkpoint=NOW - 60),
    ]
    assert victims(reclaim(teams, jobs)) == ["fresh"]


def test_the_set_is_minimal() -> None:
    # the small job is preferred (lowest priority) but freeing it alone is not enough, and
    # once the large one is chosen it is not needed either
    teams = [team("borrower", 0, borrow=16), team("owner", 16)]
    jobs = [
        running("small", "borrower", "a100-0", gpus=2, priority=0),
        running("other", "borrower", "a100-0", gpus=6, priority=4),
        running("large", "borrower", "a100-1", gpus=8, priority=1),
    ]
    assert victims(reclaim(teams, jobs)) == ["large"]


def test_a_borrowing_team_is_never_pushed_below_its_nominal_quota() -> None:
    teams = [team("borrower", 8, borrow=8), team("owner", 8)]
    jobs = [running(f"b{i}", "borrower", "a100-0", gpus=4) for i in range(2)]
    jobs += [running(f"c{i}", "borrower", "a100-1", gpus=4) for i in range(2)]
    result = reclaim(teams, jobs, gpus=16)
    assert not result.preemptions  # the owner's 16 GPUs would need 8 of the borrower's own


def test_a_higher_priority_job_preempts_a_lower_one_of_its_own_team() -> None:
    cluster = snapshot(
        gpu_nodes(1),
        [team("a", 8)],
        [running("old", "a", "a100-0", gpus=8, priority=1)],
        [pending("urgent", "a", 8, priority=5)],
    )
    result = schedule(cluster, NOW)
    assert victims(result) == ["old"]
    assert result.preemptions[0].reason == (
        "job urgent of the same team has priority 5, above this job's 1"
    )
    assert result.waiting[0].cause is WaitCause.PREEMPTING
    assert (
        result.waiting[0].reason
        == "preempting old to make room; starts once it checkpoints and stops"
    )


def test_priority_never_takes_another_teams_guaranteed_quota() -> None:
    cluster = snapshot(
        gpu_nodes(1),
        [team("a", 0, borrow=8), team("b", 8)],
        [running("b1", "b", "a100-0", gpus=8, priority=0)],
        [pending("urgent", "a", 8, priority=9)],
    )
    assert not schedule(cluster, NOW).preemptions


def test_a_higher_priority_borrower_may_take_a_lower_priority_borrowers_room() -> None:
    cluster = snapshot(
        gpu_nodes(1),
        [team("a", 0, borrow=8), team("b", 0, borrow=8), team("idle", 8)],
        [running("b1", "b", "a100-0", gpus=8, priority=0)],
        [pending("urgent", "a", 8, priority=9)],
    )
    result = schedule(cluster, NOW)
    assert victims(result) == ["b1"]
    assert result.preemptions[0].reason.endswith(
        "job urgent of team a has priority 9, above this job's 0"
    )


def test_a_gang_of_whole_nodes_clears_nodes_rather_than_taking_scattered_victims() -> None:
    # the borrower is 8 GPUs over its quota: enough to clear one node, but not if the most
    # preferred victims (least work lost) are taken wherever they run
    teams = [team("borrower", 8, borrow=8), team("owner", 8)]
    jobs = [
        running("p1", "borrower", "a100-0", gpus=4, checkpoint=NOW - 10),
        running("p2", "borrower", "a100-1", gpus=4, checkpoint=NOW - 20),
        running("q1", "borrower", "a100-0", gpus=4, checkpoint=NOW - 500),
        running("q2", "borrower", "a100-1", gpus=4, checkpoint=NOW - 600),
    ]
    assert sorted(victims(reclaim(teams, jobs))) == ["p1", "q1"]
