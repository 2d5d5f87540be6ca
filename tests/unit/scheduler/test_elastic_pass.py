"""The elastic pass: running elastic jobs grow into free room, shrink for a waiting job,
stay within their team's quota, keep their size while settling, and are placed."""

from __future__ import annotations

import math

from lifecycle_manager.scheduler import ClusterSnapshot, SchedulePass, WaitCause, Waiting
from lifecycle_manager.scheduler.elastic_optimizer import Choice
from lifecycle_manager.scheduler.elastic_pass import ElasticRunning, elastic_pass
from tests.unit.scheduler.factories import gpu_nodes, pending, running, team

CHOICES = (
    Choice(1, 64, 100.0),
    Choice(2, 128, 190.0),
    Choice(3, 192, 270.0),
    Choice(4, 256, 340.0),
)
NOTHING = SchedulePass(admissions=(), preemptions=(), waiting=())


def elastic(job_id: str, learners: int, movable: bool = True) -> ElasticRunning:
    return ElasticRunning(job_id, CHOICES, CHOICES[learners - 1], math.inf, movable)


def snapshot(
    *,
    gpus: int,
    quota: int = 64,
    borrow: int = 0,
    held: int = 1,
    waiting: tuple[str, int] = (),
    waiting_team: str = "u",
) -> ClusterSnapshot:
    """One node of `gpus` GPUs; e (team t) holds `held` of them; `waiting` (id, GPUs) of
    `waiting_team` is queued."""
    nodes = gpu_nodes(1, gpus=gpus)
    queued = (pending(waiting[0], waiting_team, gpus=waiting[1]),) if waiting else ()
    return ClusterSnapshot(
        nodes=tuple(nodes),
        teams=(team("t", gpus=quota, borrow=borrow), team("u", gpus=64)),
        running=(running("e", "t", [nodes[0].name] * held),),
        pending=queued,
    )


def waiting_for_room(job_id: str) -> SchedulePass:
    return SchedulePass((), (), (Waiting(job_id, 1, WaitCause.CAPACITY, "no room", None),))


def test_free_room_grows_a_running_job_and_places_its_new_learners() -> None:
    [resize] = elastic_pass(snapshot(gpus=4), NOTHING, [elastic("e", 1)], resize_cost_s=30)
    assert (resize.old.learners, resize.new.learners) == (1, 4)
    assert resize.nodes == ("a100-0",) * 4 and resize.gpu_product == "A100"
    assert "grows from 1 to 4 learners" in resize.reason


def test_a_job_still_settling_keeps_its_size() -> None:
    assert elastic_pass(snapshot(gpus=4), NOTHING, [elastic("e", 1, movable=False)], 30) == []


def test_a_job_that_waits_for_room_makes_a_grown_job_shrink() -> None:
    shot = snapshot(gpus=4, held=4, waiting=("w", 1))
    [resize] = elastic_pass(shot, waiting_for_room("w"), [elastic("e", 4)], 30)
    assert (resize.old.learners, resize.new.learners) == (4, 3)
    assert resize.nodes == ("a100-0",) * 3
    assert "shrinks from 4 to 3 learners" in resize.reason
    assert resize.reason.endswith("so that job w starts"), resize.reason


def test_nothing_grows_while_a_job_waits_that_shrinking_cannot_start() -> None:
    # w needs 4 GPUs; e at its smallest (1) and 2 free leave only 3
    shot = snapshot(gpus=4, held=2, waiting=("w", 4))
    assert elastic_pass(shot, waiting_for_room("w"), [elastic("e", 2)], 30) == []


def test_a_job_waiting_on_its_quota_does_not_shrink_others() -> None:
    shot = snapshot(gpus=4, held=4, waiting=("w", 1))
    quota_wait = SchedulePass((), (), (Waiting("w", 1, WaitCause.TEAM_QUOTA, "quota", None),))
    assert elastic_pass(shot, quota_wait, [elastic("e", 4)], 30) == []


def test_a_job_waiting_on_its_own_teams_quota_makes_the_teams_elastic_job_shrink() -> None:
    # team t's quota is 4 GPUs, all held by e, and w of team t waits for one of them
    shot = snapshot(gpus=8, quota=4, held=4, waiting=("w", 1), waiting_team="t")
    quota_wait = SchedulePass((), (), (Waiting("w", 1, WaitCause.TEAM_QUOTA, "quota", None),))
    [resize] = elastic_pass(shot, quota_wait, [elastic("e", 4)], 30)
    assert (resize.old.learners, resize.new.learners) == (4, 3)  # and no growth after
    assert "so that job w of the same team starts within the team's quota" in resize.reason
    # a job the quota could not hold even with e at its smallest: nothing shrinks for it
    too_big = snapshot(gpus=8, quota=4, held=4, waiting=("w", 4), waiting_team="t")
    assert elastic_pass(too_big, quota_wait, [elastic("e", 4)], 30) == []


def test_growth_stays_within_the_team_quota() -> None:
    # team t may hold 2 GPUs (1 nominal + 1 borrowed); e holds 1: it may grow to 2, not 4
    [resize] = elastic_pass(snapshot(gpus=4, quota=1, borrow=1), NOTHING, [elastic("e", 1)], 30)
    assert (resize.old.learners, resize.new.learners) == (1, 2)
    no_borrowing = elastic_pass(snapshot(gpus=4, quota=1), NOTHING, [elastic("e", 1)], 30)
    assert no_borrowing == []


def test_a_growth_that_does_not_repay_the_restart_is_not_made() -> None:
    nearly_done = ElasticRunning("e", CHOICES, CHOICES[0], 500.0)  # 5 s left at 1 learner
    assert elastic_pass(snapshot(gpus=4), NOTHING, [nearly_done], resize_cost_s=30) == []


def test_jobs_the_snapshot_does_not_hold_are_left_alone() -> None:
    assert elastic_pass(snapshot(gpus=4), NOTHING, [elastic("gone", 1)], 30) == []
