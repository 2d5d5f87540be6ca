"""No preemption cycle: passes applied one after another, with victims queued again as they
were and no job ending of itself, never preempt a job twice for the same waiting job. Jobs
of random shapes, teams with random quotas and borrowing limits, arriving in waves (the
clusters and arrivals of test_invariants). A fixed set of examples, so the suite answers
the same on every run."""

from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from lifecycle_manager.scheduler import GIB, Gang, Node, PendingJob, Quota, SchedulePass, Team
from tests.unit.scheduler.factories import NOW, play_passes
from tests.unit.scheduler.test_invariants import arrivals, clusters

ARRIVAL_WAVES = 3


def _cycles(passes: list[SchedulePass]) -> list[tuple[str, str]]:
    pairs = Counter((p.victim_id, p.for_job_id) for result in passes for p in result.preemptions)
    return [pair for pair, count in pairs.items() if count > 1]


def _trace(passes: list[SchedulePass]) -> str:
    """What each pass did, to read a failing example by."""
    lines = []
    for step, result in enumerate(passes):
        lines.append(f"pass {step}: admitted {[(a.job_id, a.nodes) for a in result.admissions]}")
        lines += [
            f"  preempts {p.victim_id} for {p.for_job_id}: {p.reason}" for p in result.preemptions
        ]
        lines += [f"  {w.job_id} waits ({w.cause}): {w.reason}" for w in result.waiting]
    return "\n".join(lines)


@settings(max_examples=300, derandomize=True, deadline=None)
@given(st.data())
def test_no_job_is_preempted_twice_for_the_same_waiting_job(data: st.DataObject) -> None:
    nodes, teams = data.draw(clusters())
    waves = [
        data.draw(arrivals(teams, 10 * wave, NOW + 60 * wave)) for wave in range(ARRIVAL_WAVES)
    ]
    jobs = sum(len(wave) for wave in waves)
    # every job may preempt or be preempted a few times before the queue settles
    passes = play_passes(list(nodes), list(teams), waves, ARRIVAL_WAVES + 2 * jobs + 2)
    assert _cycles(passes) == [], _trace(passes)


# Examples the property found, one per cause; each preempted its victim every other pass.
# Jobs of one learner-size on 256 GiB nodes: only GPUs and CPUs matter.
def _job(
    job_id: str, team: str, learners: int, gpus: int, product: str | None, priority: int = 0
) -> PendingJob:
    millicpus = 8000 if learners > 1 and gpus <= 1 else 1000
    return PendingJob(
        job_id, team, Gang(learners, gpus, product, millicpus, GIB), NOW, priority, None
    )


def _node(name: str, gpus: int, product: str) -> Node:
    return Node(name, gpus, product, 32_000, 256 * GIB)


def test_a_job_behind_a_reservation_does_not_preempt_for_room_the_head_will_take() -> None:
    nodes = [_node("n0", 4, "A100"), _node("n1", 8, "T4"), _node("n2", 8, "T4")]
    teams = [
        Team("a", Quota({"T4": 14}), Quota({}), max_priority=5),
        Team("b", Quota({}), Quota({"T4": 6}), max_priority=5),
    ]
    waves = [
        [_job("b-small", "b", 3, 1, "T4")],
        [_job("a-pair", "a", 2, 1, "T4")],
        # a-wide holds the reservation; b-urgent would preempt b-small for its quota
        [_job("a-wide", "a", 3, 4, "T4"), _job("b-urgent", "b", 3, 2, "T4", priority=1)],
    ]
    passes = play_passes(nodes, teams, waves, 12)
    assert _cycles(passes) == [], _trace(passes)


def test_a_reclaim_hidden_behind_a_borrowing_teammate_keeps_the_room_it_freed() -> None:
    nodes = [_node("n0", 4, "A100"), _node("n1", 4, "T4")]
    teams = [
        Team("a", Quota({}), Quota({"A100": 1}), max_priority=5),
        Team("b", Quota({"A100": 1}), Quota({"T4": 1}), max_priority=5),
    ]
    waves = [
        [],
        [_job("a-borrower", "a", 1, 1, "A100", priority=2)],
        # b-owner reclaims a-borrower's GPU; b-t4, b's first in priority, can only borrow
        [_job("b-owner", "b", 1, 1, "A100"), _job("b-t4", "b", 1, 1, "T4", priority=1)],
    ]
    passes = play_passes(nodes, teams, waves, 12)
    assert _cycles(passes) == [], _trace(passes)
    started = {a.job_id for result in passes for a in result.admissions}
    assert "b-owner" in started, _trace(passes)
