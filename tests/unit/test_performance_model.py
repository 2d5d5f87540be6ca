"""The performance model: where a step's time goes, and where scaling stops."""

from __future__ import annotations

import pytest

from storage.performance_model import (
    Exchange,
    ModelCosts,
    Network,
    exchange_s,
    scaling_efficiency,
    step_s,
    throughput,
)

COSTS = ModelCosts(sample_s=0.002, step_overhead_s=0.01, model_bytes=100 << 20)
NETWORK = Network(bandwidth_bytes_s=1.25e9, latency_s=1e-4)


def test_one_learner_all_reducing_only_computes() -> None:
    assert step_s(COSTS, NETWORK, 1, 64, Exchange.ALL_REDUCE) == pytest.approx(0.01 + 0.002 * 64)
    assert exchange_s(COSTS, NETWORK, 1, Exchange.ALL_REDUCE) == 0


def test_one_learner_with_a_parameter_server_still_goes_through_it() -> None:
    assert exchange_s(COSTS, NETWORK, 1, Exchange.PARAMETER_SERVER) == pytest.approx(
        2 * (100 << 20) / 1.25e9 + 2 * 1e-4
    )


def test_a_parameter_server_takes_the_update_off_the_learner() -> None:
    costs = ModelCosts(sample_s=0.002, step_overhead_s=0.01, model_bytes=100 << 20, update_s=0.004)
    ps = step_s(costs, NETWORK, 2, 64, Exchange.PARAMETER_SERVER)
    assert ps == pytest.approx(
        0.006 + 0.002 * 32 + exchange_s(costs, NETWORK, 2, Exchange.PARAMETER_SERVER)
    )
    # an all-reducing learner updates its own replica: the update stays in its step
    assert step_s(costs, NETWORK, 2, 64, Exchange.ALL_REDUCE) == pytest.approx(
        step_s(COSTS, NETWORK, 2, 64, Exchange.ALL_REDUCE)
    )
    # without an update share, as before
    assert step_s(COSTS, NETWORK, 2, 64, Exchange.PARAMETER_SERVER) == pytest.approx(
        0.01 + 0.002 * 32 + exchange_s(COSTS, NETWORK, 2, Exchange.PARAMETER_SERVER)
    )


def test_scaling_efficiency_with_a_parameter_server_is_against_one_learner_with_it() -> None:
    assert scaling_efficiency(COSTS, NETWORK, 1, 64, Exchange.PARAMETER_SERVER) == pytest.approx(1)
    assert 0 < scaling_efficiency(COSTS, NETWORK, 4, 256, Exchange.PARAMETER_SERVER) < 1


def test_ring_all_reduce_sends_twice_the_model_less_a_share() -> None:
    # 4 learners: 2 * 3/4 of the model over each link, 6 messages' latency
    expected = 1.5 * (100 << 20) / 1.25e9 + 6 * 1e-4
    assert exchange_s(COSTS, NETWORK, 4, Exchange.ALL_REDUCE) == pytest.approx(expected)


def test_the_parameter_servers_link_carries_every_learners_gradients() -> None:
    server = Network(1.25e9, 1e-4, server_bandwidth_bytes_s=2.5e9)
    expected = 2 * 4 * (100 << 20) / 2.5e9 + 2 * 1e-4
    assert exchange_s(COSTS, server, 4, Exchange.PARAMETER_SERVER) == pytest.approx(expected)
    # without a server bandwidth of its own, the server has a learner's link
    assert exchange_s(COSTS, NETWORK, 4, Exchange.PARAMETER_SERVER) == pytest.approx(
        2 * 4 * (100 << 20) / 1.25e9 + 2 * 1e-4
    )


def test_a_larger_batch_scales_better_than_a_fixed_one_split_further() -> None:
    """Splitting a fixed batch over more learners leaves each less to compute against the
    same exchange; growing the batch with the learners keeps the compute share."""
    fixed = [throughput(COSTS, NETWORK, n, 256, Exchange.ALL_REDUCE) for n in (1, 2, 4, 8)]
    grown = [throughput(COSTS, NETWORK, n, 256 * n, Exchange.ALL_REDUCE) for n in (1, 2, 4, 8)]
    assert fixed == sorted(fixed)  # still faster with more learners here, but
    assert all(g > f for g, f in zip(grown[1:], fixed[1:], strict=True))
    assert scaling_efficiency(COSTS, NETWORK, 8, 256 * 8, Exchange.ALL_REDUCE) > scaling_efficiency(
        COSTS, NETWORK, 8, 256, Exchange.ALL_REDUCE
    )
    assert 0 < scaling_efficiency(COSTS, NETWORK, 8, 256, Exchange.ALL_REDUCE) < 1
    assert scaling_efficiency(COSTS, NETWORK, 1, 256, Exchange.ALL_REDUCE) == pytest.approx(1)
