"""How long a data-parallel training step takes, from what the job computes and exchanges.

A step of `learners` learners over a global batch splits into each learner's compute on its
share of the batch and the exchange of gradients (Yan et al., KDD 2015, in its simplest
form that still shows where scaling stops):

    compute  = step_overhead_s + sample_s * global_batch / learners
               (less update_s with a parameter server, which updates the weights instead)
    exchange = ring all-reduce: 2 (n-1)/n * model_bytes / bandwidth + 2 (n-1) * latency
               parameter server: every learner sends and receives model_bytes through the
               server's link: 2 n * model_bytes / server_bandwidth + 2 * latency

One learner all-reducing exchanges nothing; one learner with a parameter server still pushes
its gradient through the server and waits for the new weights (dlaas runs the sidecar
whenever the manifest asks for one, for a single learner too). For dlaas's shared-memory
sidecar (`learner_image.ps`) the server's "link" is its pass over memory: it reads each
learner's gradient where the learner wrote it and updates the weights in place, so
`server_bandwidth_bytes_s` is what that pass achieves and `latency_s` the slot's signalling.

Throughput is the global batch over the step time; scaling efficiency is the throughput over
n times one learner's at the same per-learner batch (with the same exchange).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

from storage.settings import Settings


class Exchange(StrEnum):
    ALL_REDUCE = "allreduce"
    PARAMETER_SERVER = "parameter_server"


@dataclass(frozen=True, slots=True)
class ModelCosts:
    """What one step asks of a learner: seconds of compute per sample and per step (the
    optimizer's update, launches), and the bytes of gradients it exchanges. `update_s` is
    the optimizer's update's share of `step_overhead_s` (0: unknown, or negligible): a
    learner with a parameter server leaves the update to the server, whose cost the
    exchange counts."""

    sample_s: float
    step_overhead_s: float
    model_bytes: int
    update_s: float = 0.0


@dataclass(frozen=True, slots=True)
class Network:
    """A learner's link (bytes a second, seconds a message), and the parameter server's."""

    bandwidth_bytes_s: float
    latency_s: float
    server_bandwidth_bytes_s: float | None = None  # None: as a learner's


def configured_network(settings: Settings) -> Network:
    """The links the platform is configured with (`DLAAS_NETWORK_*`)."""
    return Network(
        settings.network_bandwidth_bytes_s,
        settings.network_latency_s,
        settings.network_server_bandwidth_bytes_s,
    )


def compute_s(
    costs: ModelCosts, learners: int, global_batch: int, exchange: Exchange = Exchange.ALL_REDUCE
) -> float:
    """A learner's seconds of compute in one step (its own update left out when a parameter
    server does it)."""
    overhead = costs.step_overhead_s
    if exchange is Exchange.PARAMETER_SERVER:
        overhead = max(overhead - costs.update_s, 0.0)
    return overhead + costs.sample_s * global_batch / learners


def exchange_s(costs: ModelCosts, network: Network, learners: int, exchange: Exchange) -> float:
    if learners < 1 or (learners == 1 and exchange is Exchange.ALL_REDUCE):
        return 0.0
    if exchange is Exchange.ALL_REDUCE:
        hops = 2 * (learners - 1)
        return hops / learners * costs.model_bytes / network.bandwidth_bytes_s + (
            hops * network.latency_s
        )
    server = network.server_bandwidth_bytes_s or network.bandwidth_bytes_s
    return 2 * learners * costs.model_bytes / server + 2 * network.latency_s


def step_s(
    costs: ModelCosts, network: Network, learners: int, global_batch: int, exchange: Exchange
) -> float:
    """Predicted seconds of one step."""
    return compute_s(costs, learners, global_batch, exchange) + exchange_s(
        costs, network, learners, exchange
    )


def throughput(
    costs: ModelCosts, network: Network, learners: int, global_batch: int, exchange: Exchange
) -> float:
    """Predicted samples a second."""
    return global_batch / step_s(costs, network, learners, global_batch, exchange)


def scaling_efficiency(
    costs: ModelCosts, network: Network, learners: int, global_batch: int, exchange: Exchange
) -> float:
    """Throughput over `learners` times that of one learner with the same per-learner batch."""
    one = throughput(costs, network, 1, max(global_batch // learners, 1), exchange)
    return throughput(costs, network, learners, global_batch, exchange) / (learners * one)


def fit_all_reduce(timings: Sequence[tuple[int, float]], learners: int) -> Network:
    """The link that best explains measured ring all-reduces among `learners` learners:
    `exchange_s` inverted. `timings` are (bytes, seconds) pairs; with n learners

        t = 2 (n-1)/n * bytes / bandwidth + 2 (n-1) * latency

    is a line in bytes, fitted by least squares of the relative error (a 4 KiB all-reduce
    counts as much as a 32 MiB one, so the latency is not lost in the large ones' noise).
    A negative intercept (a latency below what the timings can tell) is fitted again
    through zero. Raises ValueError without two sizes, or when time does not grow with size.
    """
    if learners < 2:
        raise ValueError("an all-reduce among fewer than 2 learners exchanges nothing")
    points = [(float(size), float(seconds)) for size, seconds in timings if seconds > 0]
    if len({size for size, _ in points}) < 2:
        raise ValueError("fitting a bandwidth and a latency takes timings of 2 sizes or more")
    hops = 2 * (learners - 1)
    weighted = [(1 / t**2, x, t) for x, t in points]  # minimise the sum of ((fit - t) / t)^2
    total = sum(w for w, _, _ in weighted)
    mean_x = sum(w * x for w, x, _ in weighted) / total
    mean_t = sum(w * t for w, _, t in weighted) / total
    sxx = sum(w * (x - mean_x) ** 2 for w, x, _ in weighted)
    slope = sum(w * (x - mean_x) * (t - mean_t) for w, x, t in weighted) / sxx
    intercept = mean_t - slope * mean_x
    if intercept < 0:
        slope = sum(w * x * t for w, x, t in weighted) / sum(w * x * x for w, x, _ in weighted)
        intercept = 0.0
    if slope <= 0:
        raise ValueError("the all-reduce timings do not grow with the bytes exchanged")
    return Network(bandwidth_bytes_s=hops / learners / slope, latency_s=intercept / hops)
