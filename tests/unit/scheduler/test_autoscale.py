"""The autoscaler: the optimizer's starts and resizes, less growth that does not repay a restart."""

from __future__ import annotations

import math

from lifecycle_manager.scheduler.autoscale import Sizing, autoscale
from lifecycle_manager.scheduler.elastic_optimizer import Choice, ElasticJob

ONE, TWO, FOUR = Choice(1, 64, 100.0), Choice(2, 128, 190.0), Choice(4, 256, 360.0)


def running(name: str, current: Choice, samples_left: float) -> Sizing:
    return Sizing(ElasticJob(name, 1, (ONE, TWO, FOUR), running=True), current, samples_left)


def waiting(name: str) -> Sizing:
    return Sizing(ElasticJob(name, 1, (ONE, TWO, FOUR)), None, 1e6)


def test_spare_gpus_grow_a_job_with_much_left_to_do() -> None:
    resizes = autoscale([running("a", ONE, 1e6)], 4, resize_cost_s=30)
    assert [(r.job_id, r.old, r.new) for r in resizes] == [("a", ONE, FOUR)]
    assert "grows from 1 to 4 learners" in resizes[0].reason


def test_a_job_about_to_end_is_not_restarted_to_grow() -> None:
    # 1,000 samples left: 10 s at one learner, 30 s of restart to save 7 s
    assert autoscale([running("a", ONE, 1_000)], 4, resize_cost_s=30) == []


def test_a_grown_job_shrinks_for_a_waiting_one() -> None:
    resizes = autoscale([running("a", FOUR, 1e6), waiting("b")], 4, resize_cost_s=30)
    by_job = {r.job_id: r for r in resizes}
    assert by_job["a"].old == FOUR and by_job["a"].new.learners < 4
    assert "shrinks from 4" in by_job["a"].reason
    assert by_job["b"].old is None and by_job["b"].new is not None
    assert by_job["a"].new.learners + by_job["b"].new.learners <= 4


def test_running_jobs_that_cannot_all_fit_change_nothing() -> None:
    sizings = [running(name, ONE, 1e6) for name in "abc"]
    assert autoscale(sizings, 2, resize_cost_s=30) == []


def test_a_job_whose_end_is_unknown_grows_when_the_new_size_is_faster() -> None:
    [resize] = autoscale([running("a", ONE, math.inf)], 4, resize_cost_s=30)
    assert resize.new == FOUR and "no end in sight" in resize.reason
    flat = Sizing(ElasticJob("b", 1, (ONE, Choice(2, 128, 100.0)), running=True), ONE, math.inf)
    assert autoscale([flat], 2, resize_cost_s=30) == []  # no faster: no restart
