"""A team's quota as the API takes and shows it, in the units a user writes: GPUs by product
({"A100": 8}), CPUs (16 or 0.5), memory as bytes or "64GiB", jobs running at once; null is
not limited. `storage.team_quotas` keeps it in the scheduler's units (millicpus, bytes)."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from api.manifest import MAX_PRIORITY, parse_memory
from storage.team_quotas import TeamQuota

MAX_CPUS = 1_000_000
MAX_JOBS = 1_000_000
MAX_WEIGHT = 1000.0
GPU_PRODUCT = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$"


def _memory(value: object) -> object:
    """Bytes, or "64GiB"-style text as the manifest's memory takes; 0 is a quota too."""
    if value is None or value == 0 or value == "0":
        return 0 if value is not None else None
    return parse_memory(value)


GpuCounts = dict[
    Annotated[str, Field(pattern=GPU_PRODUCT, description="a GPU product, e.g. A100")],
    Annotated[int, Field(ge=0, le=MAX_JOBS)],
]
Cpus = Annotated[float, Field(ge=0, le=MAX_CPUS, description="CPUs, e.g. 16 or 0.5")]
Memory = Annotated[
    int | None,
    BeforeValidator(_memory, json_schema_input_type=int | str | None),
    Field(description='bytes, or a number with a unit: "64GiB", "512Mi", "100GB"'),
]
Jobs = Annotated[int, Field(ge=0, le=MAX_JOBS, description="jobs running at once")]


class AmountsBody(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid", allow_inf_nan=False)

    gpus: GpuCounts | None = None
    cpus: Cpus | None = None
    memory: Memory = None
    jobs: Jobs | None = None


class QuotaBody(AmountsBody):
    """The team's quota as a whole: an amount left out or null is not limited."""

    borrowing_limit: AmountsBody = Field(
        default_factory=AmountsBody,
        description="how far beyond its quota the team may use other teams' idle quota",
    )
    weight: Annotated[float, Field(gt=0, le=MAX_WEIGHT)] = Field(
        1.0, description="the team's weight in fair sharing"
    )
    max_priority: Annotated[int, Field(ge=0, le=MAX_PRIORITY)] = Field(
        0, description="the highest priority the team's jobs may take"
    )


class Amounts(BaseModel):
    gpus: dict[str, int] | None
    cpus: float | None
    memory: int | None = Field(description="bytes")
    jobs: int | None


class QuotaPublic(Amounts):
    """null: not limited."""

    team: str
    borrowing_limit: Amounts
    weight: float
    max_priority: int


def _millicpus(cpus: float | None) -> int | None:
    return None if cpus is None else round(cpus * 1000)


def _cpus(millicpus: int | None) -> float | None:
    return None if millicpus is None else millicpus / 1000


def stored_fields(body: QuotaBody) -> dict[str, Any]:
    """`storage.team_quotas.set_team_quota`'s fields for the body."""
    borrow = body.borrowing_limit
    return {
        "gpus": body.gpus,
        "millicpus": _millicpus(body.cpus),
        "memory": body.memory,
        "jobs": body.jobs,
        "borrow_gpus": borrow.gpus,
        "borrow_millicpus": _millicpus(borrow.cpus),
        "borrow_memory": borrow.memory,
        "borrow_jobs": borrow.jobs,
        "weight": body.weight,
        "max_priority": body.max_priority,
    }


def quota_public(quota: TeamQuota) -> QuotaPublic:
    return QuotaPublic(
        team=quota.team,
        gpus=quota.gpus,
        cpus=_cpus(quota.millicpus),
        memory=quota.memory,
        jobs=quota.jobs,
        borrowing_limit=Amounts(
            gpus=quota.borrow_gpus,
            cpus=_cpus(quota.borrow_millicpus),
            memory=quota.borrow_memory,
            jobs=quota.borrow_jobs,
        ),
        weight=quota.weight,
        max_priority=quota.max_priority,
    )
