"""A plan as `POST /v2/plan` answers it: the inputs the performance model was given, and
what it predicts for each candidate size of the job."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field


class PlanCosts(BaseModel):
    """The manifest's `performance` block as the model used it."""

    sample_seconds: float = Field(description="a learner's compute per sample")
    step_overhead_seconds: float = Field(description="a learner's compute per step")
    model_bytes: int = Field(description="bytes each learner exchanges a step")


class PlanNetwork(BaseModel):
    """The cluster's links (DLAAS_NETWORK_*)."""

    bandwidth_bytes_s: float
    latency_s: float
    server_bandwidth_bytes_s: float | None = Field(
        description="the parameter server's link; null: as a learner's"
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
    samples: int | None = Field(description="performance.samples; null: not given")
    ranked_by: Literal["time_to_finish", "throughput"] = Field(
        description="what the recommendation goes by: throughput when samples is null"
    )
    candidates: list[PlanCandidate] = Field(
        description="by learners then global batch; exactly one is recommended"
    )
