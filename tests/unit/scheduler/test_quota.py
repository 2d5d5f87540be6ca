"""Quotas: nominal, borrowing up to the limit, the cohort's idle quota, reclaim, concurrency."""

from lifecycle_manager.scheduler import Quota, Team, WaitCause, schedule
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
    assert waiting.reason == (
        "team a runs 3 jobs at once, as many as its quota of 3 concurrent jobs allows"
    )
    # the node has room, but the job starts only once one of its team's jobs ends
    assert waiting.estimated_start == NOW + 3000


def test_a_job_held_back_by_quota_with_no_end_in_sight_has_no_estimated_start() -> None:
    cluster = snapshot(
        gpu_nodes(1),
        [team("a", 8, jobs=1)],
        [running("a1", "a", "a100-0", runtime=None)],
        [pending("a2", "a", 1), pending("a3", "a", 1, submitted=1)],
    )
    waits = schedule(cluster, NOW).waiting
    assert [w.estimated_start for w in waits] == [None, None]


def test_concurrent_jobs_borrowed_beyond_the_quota_read_as_borrowed() -> None:
    unlimited = Team("a", Quota({"A100": 8}, jobs=1), Quota({"A100": 0}, jobs=None))
    cluster = snapshot(
        gpu_nodes(1),
        [unlimited, team("b", 8, jobs=1)],
        [running(name, team, "a100-0") for name, team in (("a1", "a"), ("a2", "a"), ("b1", "b"))],
        [pending("a3", "a", 1)],
    )
    (waiting,) = schedule(cluster, NOW).waiting
    assert waiting.reason.startswith(
        "team a runs 2 jobs at once, 1 of them borrowed beyond its quota of 1"
    ), waiting.reason


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


def quota_kept_for_a_gang(d_holds: int, o_holds: int) -> tuple[list[str], dict[str, str]]:
    """16 GPUs; a owns 8 and holds 6, d owns 4, o owns 4. a's gang of 4 would borrow 2 and
    finds no idle quota; d wants to borrow more, o to use its own."""
    teams = [team("a", 8, borrow=8), team("d", 4, borrow=12), team("o", 4)]
    busy = [running(f"a-run{i}", "a", "a100-0") for i in range(6)]
    busy += [running(f"o-run{i}", "o", "a100-1") for i in range(o_holds)]
    busy += [
        running(f"d-run{i}", "d", "a100-1" if o_holds + i < 8 else "a100-0") for i in range(d_holds)
    ]
    jobs = [pending("a-gang", "a", gpus=4, submitted=1), pending("d-more", "d", submitted=2)]
    if o_holds < 4:
        jobs.append(pending("o-own", "o", submitted=3))
    result = schedule(snapshot(gpu_nodes(2), teams, busy, jobs), NOW)
    admitted = [a.job_id for a in result.admissions]
    return admitted, {w.job_id: w.reason for w in result.waiting if w.cause == "no_idle_quota"}


def test_idle_quota_is_kept_for_the_first_job_in_fair_order_that_waits_for_it() -> None:
    # d borrows 4 of o's idle quota: as they give it back it goes to a's gang, whose team
    # has the lower share, not to d's small jobs that would always get there first
    admitted, waiting = quota_kept_for_a_gang(d_holds=8, o_holds=0)
    assert admitted == ["o-own"]  # o's own quota is never kept from it
    assert "a-gang" in waiting
    assert waiting["d-more"] == (
        "needs 1 GPU (A100) beyond its team's nominal quota; the idle A100 GPU quota is kept "
        "for job a-gang, first in the fair order"
    )


def test_idle_quota_is_not_kept_for_a_gang_that_borrowers_could_never_make_room_for() -> None:
    # d borrows only 1 and o holds its own 4: even all of d's borrowing back would not let
    # a's gang start, so d may go on borrowing what is idle
    admitted, waiting = quota_kept_for_a_gang(d_holds=5, o_holds=4)
    assert admitted == ["d-more"]
    assert list(waiting) == ["a-gang"]


def _team_b_below_its_quota_while_a_borrows_it() -> tuple[list, list]:
    # b holds 2 of its 8 (b-run, ending at NOW + 3000); a holds its 8 and borrows 5 more,
    # so one GPU is free and no quota is idle
    busy = [running(f"a-own{i}", "a", "a100-0") for i in range(8)]
    busy += [running(f"a-lent{i}", "a", "a100-1") for i in range(5)]
    busy.append(running("b-run", "b", "a100-1", gpus=2))
    return [team("a", 8, borrow=8), team("b", 8, borrow=8)], busy


def test_a_job_as_large_as_its_team_quota_is_not_starved_by_the_team_s_later_jobs() -> None:
    teams, busy = _team_b_below_its_quota_while_a_borrows_it()
    jobs = [
        pending("b-big", "b", 8, submitted=1),
        pending("b-long", "b", 1, submitted=2, runtime=7200),  # ends after b-run
        pending("b-short", "b", 1, submitted=3, runtime=1200),  # ends before b-run
    ]
    result = schedule(snapshot(gpu_nodes(2), teams, busy, jobs), NOW)
    assert [a.job_id for a in result.admissions] == ["b-short"]
    assert result.preemptions == ()
    waiting = {w.job_id: w for w in result.waiting}
    assert waiting["b-long"].cause is WaitCause.TEAM_QUOTA
    assert waiting["b-long"].reason == (
        "waiting behind job b-big of the same team, which needs 8 A100 GPUs of the team's 8 "
        "and starts once the team's running jobs give them back"
    )


def test_once_its_team_s_jobs_are_gone_the_large_job_reclaims_its_quota() -> None:
    teams, busy = _team_b_below_its_quota_while_a_borrows_it()
    busy = [job for job in busy if job.team == "a"]  # b-run has ended
    jobs = [pending("b-big", "b", 8, submitted=1), pending("b-long", "b", 1, submitted=2)]
    result = schedule(snapshot(gpu_nodes(2), teams, busy, jobs), NOW)
    assert {p.victim_id for p in result.preemptions} == {f"a-lent{i}" for i in range(5)}
    assert {p.for_job_id for p in result.preemptions} == {"b-big"}
    assert result.admissions == ()


def test_a_team_at_its_quota_keeps_starting_its_small_jobs_behind_a_large_one() -> None:
    # a holds its whole nominal quota and borrows: nothing is kept for its large job,
    # which waits for idle quota like any borrower, and its small jobs start where they fit
    teams = [team("a", 8, borrow=8), team("b", 8)]
    busy = [running(f"a-own{i}", "a", "a100-0") for i in range(8)]
    busy += [running(f"b{i}", "b", "a100-1") for i in range(6)]
    jobs = [pending("a-big", "a", 8, submitted=1), pending("a-small", "a", 1, submitted=2)]
    result = schedule(snapshot(gpu_nodes(2), teams, busy, jobs), NOW)
    assert [a.job_id for a in result.admissions] == ["a-small"]


def test_the_team_s_jobs_that_need_none_of_the_quota_kept_still_start() -> None:
    teams, busy = _team_b_below_its_quota_while_a_borrows_it()
    teams = [
        Team(t.name, Quota({**t.nominal.gpus, "T4": 4}), t.borrowing_limit, t.weight, 10)
        for t in teams
    ]
    jobs = [
        pending("b-big", "b", 8, submitted=1),
        pending("b-t4", "b", 1, submitted=2, runtime=7200, product="T4"),
    ]
    nodes = gpu_nodes(2) + gpu_nodes(1, product="T4")
    result = schedule(snapshot(nodes, teams, busy, jobs), NOW)
    assert [(a.job_id, a.gpu_product) for a in result.admissions] == [("b-t4", "T4")]


def test_a_large_job_queued_less_than_an_hour_ago_keeps_no_quota_yet() -> None:
    teams, busy = _team_b_below_its_quota_while_a_borrows_it()
    jobs = [
        pending("b-big", "b", 8, submitted=NOW - 600),
        pending("b-long", "b", 1, submitted=NOW - 300, runtime=7200),
    ]
    result = schedule(snapshot(gpu_nodes(2), teams, busy, jobs), NOW)
    assert [a.job_id for a in result.admissions] == ["b-long"]
