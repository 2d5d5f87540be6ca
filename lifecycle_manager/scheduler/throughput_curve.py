"""An elastic job's throughput at each learner count it may run with, from its manifest's
`performance` block and corrected by what the job was measured doing.

The curve starts as the performance model's prediction (`storage.performance_model`) at
each learner count and the global batch it would run at (`storage.job_plan.elastic_batch`).
Where the job was measured, the measurement replaces the prediction; elsewhere the
prediction is scaled by how far off it was where measured (the mean ratio), so a model whose
costs are all too low by half still ranks the sizes right. A job without a `performance`
block is predicted to scale perfectly until it is measured.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from lifecycle_manager.scheduler.elastic_optimizer import Choice
from storage.job_plan import elastic_batch
from storage.performance_model import Exchange, ModelCosts, Network, throughput

# a job that says nothing of its costs: every sample costs the same, nothing is exchanged
UNKNOWN_COSTS = ModelCosts(sample_s=1e-3, step_overhead_s=0.0, model_bytes=0)
# the per-learner batch assumed for a job that gives neither a batch range nor a batch
NOMINAL_LEARNER_BATCH = 32


def _block(manifest: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    value = manifest.get(name)
    return value if isinstance(value, Mapping) else {}


def learner_range(manifest: Mapping[str, Any]) -> range:
    """The learner counts an elastic job may run with (its manifest's count alone if it is
    not elastic)."""
    elastic = manifest.get("elastic")
    learners = int(manifest.get("learners", 1))
    if not isinstance(elastic, Mapping):
        return range(learners, learners + 1)
    low = int(elastic.get("min_learners") or 1)
    high = elastic.get("max_learners")
    return range(low, max(int(high) if high is not None else learners, low) + 1)


def batch_at(manifest: Mapping[str, Any], learners: int) -> int | None:
    """The global batch `learners` learners run the job at: from the elastic batch range,
    else the same per-learner batch as the manifest's (its `performance.batch_size`
    split over its learners); None when no batch of the range suits that many learners."""
    elastic = _block(manifest, "elastic")
    if elastic.get("min_batch_size") is not None:
        return elastic_batch(
            learners,
            elastic.get("min_batch_size"),
            elastic.get("max_batch_size"),
            elastic.get("max_learner_batch_size"),
        )
    asked = _block(manifest, "performance").get("batch_size")
    per_learner = (
        max(int(asked) // int(manifest.get("learners", 1)), 1)
        if asked is not None
        else NOMINAL_LEARNER_BATCH
    )
    return per_learner * learners


def model_costs(manifest: Mapping[str, Any]) -> ModelCosts:
    performance = _block(manifest, "performance")
    if performance.get("sample_seconds") is None:
        return UNKNOWN_COSTS
    return ModelCosts(
        sample_s=float(performance["sample_seconds"]),
        step_overhead_s=float(performance.get("step_overhead_seconds") or 0.0),
        model_bytes=int(performance.get("model_bytes") or 0),
    )


def exchange_of(manifest: Mapping[str, Any]) -> Exchange:
    if isinstance(manifest.get("parameter_server"), Mapping):
        return Exchange.PARAMETER_SERVER
    return Exchange.ALL_REDUCE


def measured_throughput(
    points: Sequence[tuple[float, int]], global_batch: int, span_s: float
) -> float | None:
    """Samples a second from the chief's (time, step) points of one attempt, oldest first:
    the steps between the first and the last over the time between them. None until the
    points span `span_s` seconds and at least two steps."""
    if len(points) < 2:
        return None
    (t0, s0), (t1, s1) = points[0], points[-1]
    if t1 - t0 < span_s or s1 - s0 < 2:
        return None
    return (s1 - s0) * global_batch / (t1 - t0)


def throughput_curve(
    manifest: Mapping[str, Any],
    network: Network,
    measured: Mapping[tuple[int, int], float],
) -> tuple[Choice, ...]:
    """One choice per learner count of the job's range that has a batch: the samples a
    second expected there. `measured` maps (learners, global batch) to samples a second."""
    costs, exchange = model_costs(manifest), exchange_of(manifest)
    shapes = [(n, b) for n in learner_range(manifest) if (b := batch_at(manifest, n)) is not None]
    predicted = {shape: throughput(costs, network, *shape, exchange) for shape in shapes}
    ratios = [seen / predicted[s] for s, seen in measured.items() if predicted.get(s, 0) > 0]
    scale = sum(ratios) / len(ratios) if ratios else 1.0
    return tuple(Choice(n, b, measured.get((n, b), predicted[(n, b)] * scale)) for n, b in shapes)
