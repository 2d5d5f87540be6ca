"""An elastic job's throughput curve: the performance model's prediction at each learner
count and its batch, replaced where measured and scaled by the measurement elsewhere."""

from __future__ import annotations

import pytest

from lifecycle_manager.scheduler.throughput_curve import (
    UNKNOWN_COSTS,
    batch_at,
    exchange_of,
    learner_range,
    measured_throughput,
    model_costs,
    throughput_curve,
)
from storage.performance_model import Exchange, ModelCosts, Network, throughput

NETWORK = Network(bandwidth_bytes_s=1e9, latency_s=1e-4)
ELASTIC = {
    "learners": 1,
    "elastic": {
        "min_learners": 1,
        "max_learners": 4,
        "min_batch_size": 32,
        "max_batch_size": 256,
        "max_learner_batch_size": 96,
    },
    "performance": {"sample_seconds": 0.001, "step_overhead_seconds": 0.01, "model_bytes": 10**7},
}
COSTS = ModelCosts(sample_s=0.001, step_overhead_s=0.01, model_bytes=10**7)


def test_the_curve_is_the_model_at_each_learner_count_and_its_batch() -> None:
    curve = throughput_curve(ELASTIC, NETWORK, {})
    assert [(c.learners, c.global_batch) for c in curve] == [(1, 96), (2, 192), (3, 255), (4, 256)]
    for choice in curve:
        expected = throughput(
            COSTS, NETWORK, choice.learners, choice.global_batch, Exchange.ALL_REDUCE
        )
        assert choice.throughput == pytest.approx(expected)


def test_a_measurement_replaces_the_prediction_and_scales_the_rest() -> None:
    predicted = {c.learners: c.throughput for c in throughput_curve(ELASTIC, NETWORK, {})}
    curve = throughput_curve(ELASTIC, NETWORK, {(1, 96): predicted[1] / 2})
    by_learners = {c.learners: c.throughput for c in curve}
    assert by_learners[1] == pytest.approx(predicted[1] / 2)
    assert by_learners[3] == pytest.approx(predicted[3] / 2)  # the model was 2x too fast


def test_a_job_without_a_batch_range_keeps_its_per_learner_batch() -> None:
    manifest = {"learners": 2, "elastic": {"min_learners": 1, "max_learners": 3}}
    assert [batch_at(manifest, n) for n in (1, 2, 3)] == [32, 64, 96]
    manifest["performance"] = {"sample_seconds": 0.01, "batch_size": 100}
    assert [batch_at(manifest, n) for n in (1, 2, 3)] == [50, 100, 150]
    assert model_costs({}) == UNKNOWN_COSTS


def test_learner_ranges_and_exchanges() -> None:
    assert list(learner_range({"learners": 3})) == [3]
    assert list(learner_range({"learners": 2, "elastic": {"min_learners": 2}})) == [2]
    assert list(learner_range(ELASTIC)) == [1, 2, 3, 4]
    assert exchange_of({"parameter_server": {"mode": "sync"}}) is Exchange.PARAMETER_SERVER
    assert exchange_of(ELASTIC) is Exchange.ALL_REDUCE


def test_throughput_is_measured_over_a_span_of_steps() -> None:
    assert measured_throughput([(0.0, 10)], 64, span_s=5) is None
    assert measured_throughput([(0.0, 10), (2.0, 30)], 64, span_s=5) is None  # too short
    assert measured_throughput([(0.0, 10), (6.0, 11)], 64, span_s=5) is None  # one step
    assert measured_throughput([(0.0, 10), (3.0, 20), (10.0, 60)], 64, span_s=5) == 320.0
