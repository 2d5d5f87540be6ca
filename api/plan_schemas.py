"""A plan as `POST /v2/plan` answers it: the inputs the performance model was given, and
what it predicts for each candidate size of the job."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field


class PlanCosts(BaseModel):
    """The manifest's `performance` block as the model used it."""

    sample_seconds: float = Field(
        description="a learner's compute per sample: the manifest's, or its flops_per_sample "
        "over the calibration's device_flops_s"
    )
    flops_per_sample: float | None = Field(
        description="the manifest's; null when it gives sample_seconds"
    )
    step_overhead_seconds: float = Field(description="a learner's compute per step")
    model_bytes: int = Field(description="bytes each learner exchanges a step")
    source: Literal["manifest", "calibration"] = Field(description="where sample_seconds came from")


class PlanNetwork(BaseModel):
    """The links exchanges go over: the cluster's (DLAAS_NETWORK_*), or a calibration's."""

    bandwidth_bytes_s: float
    latency_s: float
    server_bandwidth_bytes_s: float | None = Field(
        description="the parameter server's link (always DLAAS_NETWORK_SERVER_BANDWIDTH_BYTES_S)"
        "; null: as a learner's"
    )
    source: Literal["settings", "calibration"] = Field(
        description="where bandwidth_bytes_s and latency_s came from: DLAAS_NETWORK_*, or the "
        "calibration job's all-reduces"
    )


class PlanCalibration(BaseModel):
    """The calibration job the plan was asked to use, and what it measured."""

    job_id: str
    learners: int = Field(description="the learners it measured")
    device_flops_s: float = Field(description="the slowest learner's float32 matmul speed")
    bandwidth_bytes_s: float | None = Field(description="null: one learner, no link measured")
    latency_s: float | None
    torch_version: str
    used: list[Literal["sample_seconds", "network"]] = Field(
        description="the plan's inputs it gave: sample_seconds (from the manifest's "
        "flops_per_sample) and the network's bandwidth and latency; empty when the manifest's "
        "sample_seconds and a one-learner calibration leave it nothing to give"
    )


class PlanCandidate(BaseModel):
    learners: int
    global_batch: int = Field(description="samples a step, over every learner")
    learner_batch: float = Field(description="each learner's share of the global batch")
    step_s: float = Field(description="predicted seconds of one step")
    throughput_samples_s: float
    time_to_finish_s: float | None = Field(
        description="seconds to train on `samples`; null when the manifest gives none"
    )
    scaling_efficiency: float = Field(
        description="throughput over that of as many lone learners at the same learner batch"
    )
    recommended: bool


class PlanPublic(BaseModel):
    name: str = Field(description="the manifest's name")
    exchange: Literal["allreduce", "parameter_server"] = Field(
        description="how gradients are exchanged: parameter_server when the manifest has a "
        "parameter_server block"
    )
    costs: PlanCosts
    network: PlanNetwork
    calibration: PlanCalibration | None = Field(
        description="the calibration named by the `calibration` parameter; null: none"
    )
    samples: int | None = Field(description="performance.samples; null: not given")
    ranked_by: Literal["time_to_finish", "throughput"] = Field(
        description="what the recommendation goes by: throughput when samples is null"
    )
    candidates: list[PlanCandidate] = Field(
        description="by learners then global batch; exactly one is recommended"
    )
