"""`POST /v2/plan`: what the performance model predicts for the sizes a manifest allows.

The candidates are the learner counts the job may run at (`elastic.min_learners` to
`elastic.max_learners`, else 1 to `learners`), each at the global batches it may use: with
an elastic batch range, its two ends, the powers of two inside it and the batch dlaas would
pick (`Elastic.batch_for`), each rounded down to a multiple of the learners so that every
learner takes the same whole share of 1 to `max_learner_batch_size` samples; without a
range, `performance.batch_size`. The work is bounded by the manifest's own bounds: at most
64 learners times 28 batches (a range holds 25 powers of two at most).
`storage.job_plan.plan` predicts and recommends; nothing here is stored or read back.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from api.errors import Invalid
from api.manifest import MAX_LEARNERS, Elastic, Manifest, Performance, parse_manifest
from api.plan_schemas import (
    PlanCalibration,
    PlanCandidate,
    PlanCosts,
    PlanNetwork,
    PlanPublic,
)
from storage.calibration import Calibration
from storage.job_plan import Candidate, plan
from storage.performance_model import Exchange, ModelCosts, Network, configured_network
from storage.settings import Settings

PERFORMANCE_EXAMPLE = (
    "performance: {sample_seconds: 0.002, step_overhead_seconds: 0.01, "
    "model_bytes: 50000000, samples: 6000000, batch_size: 256}"
)


@dataclass(frozen=True)
class Calibrated:
    """A calibration job's figures (`storage.calibration`), and the job that measured them."""

    job_id: str
    calibration: Calibration


def plan_manifest(
    text: bytes | str, settings: Settings, calibrated: Calibrated | None = None
) -> PlanPublic:
    """The plan of an uploaded manifest, with the figures of a calibration if one is named.
    Raises `Invalid` naming the field at fault."""
    return plan_of(parse_manifest(text), configured_network(settings), calibrated)


def plan_of(
    manifest: Manifest, configured: Network, calibrated: Calibrated | None = None
) -> PlanPublic:
    """A measured link replaces the configured one (the parameter server's stays as
    configured: a calibration times learners' all-reduces); a device speed turns
    `flops_per_sample` into seconds. A manifest's `sample_seconds`, measured on the
    model itself, is kept over a matmul's speed."""
    performance = _performance(manifest)
    calibration = calibrated.calibration if calibrated is not None else None
    sample_s = _sample_seconds(performance, calibration)
    network, network_measured = configured, False
    if calibration is not None and calibration.bandwidth_bytes_s is not None:
        network = Network(
            calibration.bandwidth_bytes_s,
            calibration.latency_s or 0.0,
            configured.server_bandwidth_bytes_s,
        )
        network_measured = True
    costs = ModelCosts(sample_s, performance.step_overhead_seconds, performance.model_bytes)
    exchange = Exchange.ALL_REDUCE
    if manifest.parameter_server is not None:
        exchange = Exchange.PARAMETER_SERVER
    candidates = plan(costs, network, exchange, shapes(manifest), performance.samples)
    if not candidates:
        fewest = learner_counts(manifest).start
        raise Invalid(
            f"invalid manifest: performance.batch_size: {performance.batch_size} samples "
            f"leave some of elastic.min_learners ({fewest}) without a sample; make "
            f"batch_size at least {fewest}",
            code="invalid_manifest",
            field="performance.batch_size",
        )
    return PlanPublic(
        name=manifest.name,
        exchange=exchange.value,
        costs=PlanCosts(
            sample_seconds=costs.sample_s,
            flops_per_sample=performance.flops_per_sample,
            step_overhead_seconds=costs.step_overhead_s,
            model_bytes=costs.model_bytes,
            source="manifest" if performance.sample_seconds is not None else "calibration",
        ),
        network=PlanNetwork(
            bandwidth_bytes_s=network.bandwidth_bytes_s,
            latency_s=network.latency_s,
            server_bandwidth_bytes_s=network.server_bandwidth_bytes_s,
            source="calibration" if network_measured else "settings",
        ),
        calibration=_calibration_public(calibrated, performance, network_measured),
        samples=performance.samples,
        ranked_by="throughput" if performance.samples is None else "time_to_finish",
        candidates=[_public(c) for c in candidates],
    )


def _performance(manifest: Manifest) -> Performance:
    performance = manifest.performance
    if performance is None:
        raise Invalid(
            "invalid manifest: performance: missing; a plan needs what a step costs: add a "
            f"block such as {PERFORMANCE_EXAMPLE} (samples: what the whole training "
            "processes, for the time to finish; batch_size: the global batch, unless "
            "elastic gives min_batch_size and max_batch_size)",
            code="invalid_manifest",
            field="performance",
        )
    if _batch_range(manifest.elastic) is None and performance.batch_size is None:
        raise Invalid(
            "invalid manifest: performance.batch_size: missing; a plan needs the global "
            "batch: add performance.batch_size (e.g. batch_size: 256), or give elastic a "
            "range with min_batch_size and max_batch_size",
            code="invalid_manifest",
            field="performance.batch_size",
        )
    return performance


def _sample_seconds(performance: Performance, calibration: Calibration | None) -> float:
    if performance.sample_seconds is not None:
        return performance.sample_seconds
    flops = performance.flops_per_sample
    assert flops is not None  # the manifest holds one of the two
    if calibration is None:
        raise Invalid(
            "calibration: missing; performance.flops_per_sample needs the device's speed: "
            "name a calibration job (POST /v2/plan?calibration=JOB_ID, or dlaas plan "
            "MANIFEST --calibration JOB_ID; examples/calibrate runs one), or give "
            "performance.sample_seconds instead",
            code="calibration_needed",
            field="calibration",
        )
    return flops / calibration.device_flops_s


def _calibration_public(
    calibrated: Calibrated | None, performance: Performance, network_measured: bool
) -> PlanCalibration | None:
    if calibrated is None:
        return None
    calibration = calibrated.calibration
    used: list[Literal["sample_seconds", "network"]] = []
    if performance.sample_seconds is None:
        used.append("sample_seconds")
    if network_measured:
        used.append("network")
    return PlanCalibration(
        job_id=calibrated.job_id,
        learners=calibration.learners,
        device_flops_s=calibration.device_flops_s,
        bandwidth_bytes_s=calibration.bandwidth_bytes_s,
        latency_s=calibration.latency_s,
        torch_version=calibration.torch_version,
        used=used,
    )


def _batch_range(elastic: Elastic | None) -> tuple[int, int] | None:
    if elastic is None or elastic.min_batch_size is None or elastic.max_batch_size is None:
        return None
    return elastic.min_batch_size, elastic.max_batch_size


def learner_counts(manifest: Manifest) -> range:
    """The learner counts the job may run at: an elastic job's range (up to the platform's
    most when it names no max_learners), else 1 to its `learners`."""
    elastic = manifest.elastic
    if elastic is None:
        return range(1, manifest.learners + 1)
    most = elastic.max_learners if elastic.max_learners is not None else MAX_LEARNERS
    return range(elastic.min_learners, most + 1)


def global_batches(manifest: Manifest, learners: int) -> list[int]:
    """The global batches `learners` learners are planned at, smallest first."""
    elastic = manifest.elastic
    batch_range = _batch_range(elastic)
    if elastic is None or batch_range is None:
        fixed = manifest.performance.batch_size if manifest.performance is not None else None
        return [fixed] if fixed is not None and fixed >= learners else []
    low, high = batch_range
    choices = {low, high, *(1 << k for k in range(high.bit_length()) if low <= 1 << k <= high)}
    picked = elastic.batch_for(learners)
    if picked is not None:
        choices.add(picked)
    cap = elastic.max_learner_batch_size
    most = high if cap is None else min(high, learners * cap)
    whole = {b - b % learners for b in choices}  # every learner takes the same whole share
    return sorted(b for b in whole if max(low, learners) <= b <= most)


def shapes(manifest: Manifest) -> list[tuple[int, int]]:
    """Every (learners, global batch) the plan considers."""
    return [(n, b) for n in learner_counts(manifest) for b in global_batches(manifest, n)]


def _public(candidate: Candidate) -> PlanCandidate:
    return PlanCandidate(
        learners=candidate.learners,
        global_batch=candidate.global_batch,
        learner_batch=candidate.global_batch / candidate.learners,
        step_s=candidate.step_s,
        throughput_samples_s=candidate.throughput,
        time_to_finish_s=candidate.time_to_finish_s,
        scaling_efficiency=candidate.scaling_efficiency,
        recommended=candidate.recommended,
    )
