"""EASY backfill: jobs go ahead of the reservation only where they cannot delay it."""

from lifecycle_manager.scheduler import WaitCause, schedule
from tests.unit.scheduler.factories import NOW, gpu_nodes, pending, running, snapshot, team

# two 8-GPU nodes: node 0 busy until NOW + 1000, half of node 1 until NOW + 5000
RUNNING = [
    running("r0", "a", "a100-0", gpus=8, started=NOW, runtime=1000),
    running("r1", "a", "a100-1", gpus=4, started=NOW, runtime=5000),
]
HEAD = pending("head", "a", gpus=8, learners=2, submitted=1)


def pass_with(*jobs: object) -> dict[str, object]:
    cluster = snapshot(gpu_nodes(2), [team("a", 64)], RUNNING, [HEAD, *jobs])  # type: ignore[list-item]
    result = schedule(cluster, NOW)
    return {a.job_id: a for a in result.admissions} | {w.job_id: w for w in result.waiting}


def test_the_head_reserves_the_earliest_room_for_its_whole_gang() -> None:
    head = pass_with()["head"]
    assert head.cause is WaitCause.CAPACITY
    assert head.estimated_start == NOW + 5000
    assert "holds the reservation" in head.reason


def test_a_job_that_would_delay_the_head_waits_behind_it() -> None:
    long = pass_with(pending("long", "a", gpus=4, submitted=2, runtime=10_000))["long"]
    assert long.cause is WaitCause.RESERVATION
    assert (
        long.reason
        == "waiting behind job head (priority 0) which holds the reservation for A100 GPUs"
    )


def test_a_job_that_ends_before_the_reservation_goes_ahead() -> None:
    short = pass_with(pending("short", "a", gpus=4, submitted=2, runtime=2000))["short"]
    assert short.backfilled
    assert short.nodes == ("a100-1",)


def test_a_job_without_a_runtime_estimate_never_counts_as_short() -> None:
    unknown = pass_with(pending("unknown", "a", gpus=4, submitted=2, runtime=None))["unknown"]
    assert unknown.cause is WaitCause.RESERVATION


def test_a_job_may_use_room_the_reservation_does_not_need() -> None:
    # the head needs one whole node: node 0 at NOW + 1000; node 1's free half is not needed
    head = pending("head", "a", gpus=8, submitted=1)
    cluster = snapshot(
        gpu_nodes(2),
        [team("a", 64)],
        RUNNING,
        [head, pending("long", "a", gpus=4, submitted=2, runtime=10_000)],
    )
    result = schedule(cluster, NOW)
    assert [(a.job_id, a.backfilled) for a in result.admissions] == [("long", True)]
    (waiting,) = result.waiting
    assert (waiting.job_id, waiting.estimated_start) == ("head", NOW + 1000)


def test_waiting_jobs_have_positions_and_later_estimates_further_back() -> None:
    jobs = [pending(f"j{i}", "a", gpus=8, submitted=2 + i, runtime=3000) for i in range(3)]
    cluster = snapshot(gpu_nodes(2), [team("a", 64)], RUNNING, [HEAD, *jobs])
    waiting = schedule(cluster, NOW).waiting
    assert [w.position for w in waiting] == [1, 2, 3, 4]
    starts = [w.estimated_start for w in waiting]
    assert starts == sorted(starts)
    assert starts[0] == NOW + 5000
