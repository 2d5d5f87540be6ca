"""The queue's order: priority and FIFO within a team, weighted DRF between teams."""

from collections import Counter

from lifecycle_manager.scheduler import PendingJob, queue_order, schedule
from tests.unit.scheduler.factories import NOW, gpu_nodes, pending, running, snapshot, team


def ids(jobs: list[PendingJob]) -> list[str]:
    return [job.id for job in jobs]


def test_higher_priority_first_and_first_come_first_within_a_priority() -> None:
    jobs = [
        pending("old-low", "a", priority=0, submitted=1),
        pending("new-high", "a", priority=5, submitted=3),
        pending("old-high", "a", priority=5, submitted=2),
        pending("new-low", "a", priority=0, submitted=4),
    ]
    cluster = snapshot(gpu_nodes(1), [team("a", 8)], pending_jobs=jobs)
    assert ids(queue_order(cluster)) == ["old-high", "new-high", "old-low", "new-low"]


def test_a_priority_above_the_teams_maximum_counts_as_the_maximum() -> None:
    jobs = [
        pending("first", "a", priority=3, submitted=1),
        pending("greedy", "a", priority=9, submitted=2),
    ]
    cluster = snapshot(gpu_nodes(1), [team("a", 8, max_priority=3)], pending_jobs=jobs)
    assert ids(queue_order(cluster)) == ["first", "greedy"]


def test_jobs_within_nominal_quota_go_before_borrowing_jobs_of_any_priority() -> None:
    jobs = [
        pending("a-borrow", "a", gpus=8, priority=9, submitted=1),
        pending("b-own", "b", gpus=8, priority=0, submitted=2),
    ]
    cluster = snapshot(gpu_nodes(2), [team("a", 0, borrow=8), team("b", 16)], pending_jobs=jobs)
    assert ids(queue_order(cluster)) == ["b-own", "a-borrow"]


def borrowed_split(weight_a: float, weight_c: float) -> Counter[str]:
    """16 GPUs; a owns 8, b owns 8 and is idle, c owns none: a and c share b's 8."""
    teams = [
        team("a", 8, borrow=8, weight=weight_a),
        team("b", 8),
        team("c", 0, borrow=8, weight=weight_c),
    ]
    jobs = [pending(f"a{i}", "a", submitted=i) for i in range(16)]
    jobs += [pending(f"c{i}", "c", submitted=i) for i in range(16)]
    result = schedule(snapshot(gpu_nodes(2), teams, pending_jobs=jobs), NOW)
    return Counter(a.team for a in result.admissions)


def test_equal_weights_share_the_idle_quota_by_dominant_share() -> None:
    # a already holds 8 of 16 GPUs, c none: c borrows until their shares are equal
    assert borrowed_split(1, 1) == {"a": 8, "c": 8}


def test_weights_tilt_the_shares() -> None:
    # a's share per weight is (8 + x) / 16 / 3, c's (8 - x) / 16: equal at x = 4
    assert borrowed_split(3, 1) == {"a": 12, "c": 4}


def test_two_teams_with_demand_take_turns_in_proportion_to_weight() -> None:
    teams = [team("x", 0, borrow=16, weight=1), team("y", 0, borrow=16, weight=3), team("o", 16)]
    jobs = [pending(f"x{i}", "x", submitted=i) for i in range(16)]
    jobs += [pending(f"y{i}", "y", submitted=i) for i in range(16)]
    result = schedule(snapshot(gpu_nodes(2), teams, pending_jobs=jobs), NOW)
    assert Counter(a.team for a in result.admissions) == {"x": 4, "y": 12}


def test_a_team_is_charged_only_for_what_it_is_granted() -> None:
    # x's gang fits x's quota but not the nodes yet; had it started, x's next job would
    # wait for y's (queue_order), but as it did not, x keeps its low share and goes first
    teams = [team("x", 16), team("y", 8, borrow=8)]
    y_jobs = [running("y1", "y", "a100-0", gpus=4), running("y2", "y", "a100-1", gpus=4)]
    jobs = [
        pending("x-big", "x", gpus=8, learners=2, submitted=1),
        pending("y-small", "y", submitted=2),
        pending("x-small", "x", submitted=3),
    ]
    cluster = snapshot(gpu_nodes(3), teams, y_jobs, jobs)
    assert ids(queue_order(cluster)) == ["x-big", "y-small", "x-small"]
    result = schedule(cluster, NOW)
    assert [a.job_id for a in result.admissions] == ["x-small", "y-small"]


def test_waiting_positions_follow_the_order_jobs_are_expected_to_start() -> None:
    # the cluster is full: team a's three jobs came first, yet the teams take turns
    teams = [team("a", 8), team("b", 8), team("x", 8)]
    busy = [running("blocker", "x", "a100-0", gpus=8, runtime=None)]
    jobs = [pending(f"a{i}", "a", submitted=i) for i in range(3)]
    jobs += [pending(f"b{i}", "b", submitted=3 + i) for i in range(3)]
    result = schedule(snapshot(gpu_nodes(1), teams, busy, jobs), NOW)
    assert result.admissions == ()
    order = [w.job_id for w in sorted(result.waiting, key=lambda w: w.position)]
    assert order == ["a0", "b0", "a1", "b1", "a2", "b2"]
    assert [w.position for w in result.waiting] == [1, 2, 3, 4, 5, 6]


def test_a_team_below_its_quota_goes_first_even_behind_its_own_large_gang() -> None:
    # d holds 2 of its 8 and waits first for a gang that would borrow; a already holds its
    # 8 and wants to borrow. d's small job behind its gang (short enough not to delay the
    # gang, which waits for d-run) still comes before a's borrowing, so it takes free room
    # instead of reclaiming it from a afterwards
    teams = [team("a", 8, borrow=8), team("d", 8, borrow=8)]
    busy = [running(f"a-run{i}", "a", "a100-0") for i in range(8)]
    busy.append(running("d-run", "d", "a100-1", gpus=2))
    jobs = [pending("d-big", "d", gpus=8, submitted=1)]
    jobs += [pending(f"a{i}", "a", submitted=2 + i) for i in range(6)]
    jobs.append(pending("d-small", "d", submitted=9, runtime=1200))
    result = schedule(snapshot(gpu_nodes(2), teams, busy, jobs), NOW)
    assert result.preemptions == ()
    assert [a.job_id for a in result.admissions] == ["d-small", "a0", "a1", "a2", "a3", "a4"]
