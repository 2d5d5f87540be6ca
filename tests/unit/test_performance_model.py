"""The performance model: where a step's time goes, and where scaling stops."""

from __future__ import annotations

import pytest

from storage.performance_model import (
    Exchange,
    ModelCosts,
    Network,
    exchange_s,
    fit_all_reduce,
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


SIZES = [4 << 10 << 2 * k for k in range(7)] + [32 << 20]  # 4 KiB, 16 KiB, ... 16 MiB, 32 MiB


def _timings(
    network: Network, learners: int, noise: list[float] | None = None
) -> list[tuple[int, float]]:
    """What `exchange_s` says an all-reduce of each size takes, times (1 + noise)."""
    noise = noise or [0.0] * len(SIZES)
    return [
        (size, exchange_s(ModelCosts(0, 0, size), network, learners, Exchange.ALL_REDUCE) * (1 + e))
        for size, e in zip(SIZES, noise, strict=True)
    ]


@pytest.mark.parametrize("learners", [2, 3, 8])
def test_the_fit_recovers_the_link_the_timings_came_from(learners: int) -> None:
    link = Network(bandwidth_bytes_s=3.2e9, latency_s=4e-5)
    fitted = fit_all_reduce(_timings(link, learners), learners)
    assert fitted.bandwidth_bytes_s == pytest.approx(3.2e9)
    assert fitted.latency_s == pytest.approx(4e-5)


def test_noisy_timings_still_give_the_link_roughly_and_latency_is_not_lost() -> None:
    link = Network(bandwidth_bytes_s=1e9, latency_s=2e-4)
    noise = [0.05, -0.04, 0.03, -0.05, 0.04, -0.03, 0.05, -0.02]
    fitted = fit_all_reduce(_timings(link, 2, noise), 2)
    assert fitted.bandwidth_bytes_s == pytest.approx(1e9, rel=0.1)
    # an unweighted fit would let the 32 MiB timing's 2% swamp the 4 KiB ones' 0.4 ms
    assert fitted.latency_s == pytest.approx(2e-4, rel=0.1)


def test_a_latency_too_small_to_see_is_fitted_as_none() -> None:
    link = Network(bandwidth_bytes_s=2e9, latency_s=0.0)
    noise = [-0.05, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.05]
    fitted = fit_all_reduce(_timings(link, 4, noise), 4)
    assert fitted.latency_s == 0.0
    assert fitted.bandwidth_bytes_s == pytest.approx(2e9, rel=0.1)


def test_timings_that_cannot_be_fitted_are_refused() -> None:
    with pytest.raises(ValueError, match="fewer than 2 learners"):
        fit_all_reduce([(4096, 1e-4), (8192, 2e-4)], 1)
    with pytest.raises(ValueError, match="2 sizes"):
        fit_all_reduce([(4096, 1e-4), (4096, 2e-4)], 2)
    with pytest.raises(ValueError, match="do not grow"):
        fit_all_reduce([(4096, 2e-3), (1 << 20, 1e-3)], 2)
