"""A job's plan: every candidate the model predicts, and the one it recommends."""

from __future__ import annotations

import pytest

from storage.job_plan import WITHIN, plan
from storage.performance_model import Exchange, ModelCosts, Network, step_s

NETWORK = Network(bandwidth_bytes_s=1.25e9, latency_s=5e-5)
SAMPLES = 1_000_000


def test_each_candidate_is_what_the_model_predicts() -> None:
    costs = ModelCosts(sample_s=0.002, step_overhead_s=0.01, model_bytes=100 << 20)
    candidates = plan(costs, NETWORK, Exchange.ALL_REDUCE, [(2, 256), (1, 128)], SAMPLES)
    assert [(c.learners, c.global_batch) for c in candidates] == [(1, 128), (2, 256)]
    for c in candidates:
        assert c.step_s == pytest.approx(
            step_s(costs, NETWORK, c.learners, c.global_batch, Exchange.ALL_REDUCE)
        )
        assert c.throughput == pytest.approx(c.global_batch / c.step_s)
        assert c.time_to_finish_s == pytest.approx(SAMPLES / c.throughput)
    assert candidates[0].scaling_efficiency == pytest.approx(1)
    assert 0 < candidates[1].scaling_efficiency < 1


def test_the_recommendation_is_the_fewest_learners_near_the_fastest() -> None:
    """Compute-bound, the batch growing with the learners: every learner helps, so the most
    win. A fixed batch over a model with much to exchange: beyond a few learners the time
    hardly falls, and the fewest near the fastest are recommended."""
    grown = [(n, 128 * n) for n in (1, 2, 4, 8, 16)]
    compute_bound = ModelCosts(sample_s=0.01, step_overhead_s=0.0, model_bytes=1 << 20)
    candidates = plan(compute_bound, NETWORK, Exchange.ALL_REDUCE, grown, SAMPLES)
    assert [c.learners for c in candidates if c.recommended] == [16]

    fixed = [(n, 128) for n in (1, 2, 4, 8, 16)]
    exchange_bound = ModelCosts(sample_s=0.0005, step_overhead_s=0.01, model_bytes=20 << 20)
    candidates = plan(exchange_bound, NETWORK, Exchange.ALL_REDUCE, fixed, SAMPLES)
    (pick,) = [c for c in candidates if c.recommended]
    fastest = min(c.time_to_finish_s for c in candidates)
    assert pick.learners == 4
    assert fastest < pick.time_to_finish_s <= fastest * (1 + WITHIN)
    assert all(c.time_to_finish_s > fastest * (1 + WITHIN) for c in candidates if c.learners < 4)


def test_shapes_with_fewer_samples_than_learners_are_left_out() -> None:
    costs = ModelCosts(sample_s=0.002, step_overhead_s=0.01, model_bytes=1 << 20)
    assert plan(costs, NETWORK, Exchange.ALL_REDUCE, [(4, 2), (0, 8)], SAMPLES) == []


def test_without_samples_the_pick_goes_by_throughput_and_no_time_is_predicted() -> None:
    """The time to finish is the samples over the throughput: the same pick either way."""
    fixed = [(n, 128) for n in (1, 2, 4, 8, 16)]
    costs = ModelCosts(sample_s=0.0005, step_overhead_s=0.01, model_bytes=20 << 20)
    known = plan(costs, NETWORK, Exchange.ALL_REDUCE, fixed, SAMPLES)
    unknown = plan(costs, NETWORK, Exchange.ALL_REDUCE, fixed, None)
    assert all(c.time_to_finish_s is None for c in unknown)
    assert [c.recommended for c in unknown] == [c.recommended for c in known]
    assert [c.throughput for c in unknown] == [c.throughput for c in known]
    (pick,) = [c for c in unknown if c.recommended]
    best = max(c.throughput for c in unknown)
    assert pick.learners == 4 and pick.throughput >= best / (1 + WITHIN)
