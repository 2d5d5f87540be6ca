"""A team's quota as the API takes and shows it, in the units a user writes: GPUs by product
({"A100": 8}), CPUs (16 or 0.5), memory as bytes or "64GiB", jobs running at once; null is
not limited. `storage.team_quotas` keeps it in the scheduler's units (millicpus, bytes)."""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    WithJsonSchema,
)

from api.json_numbers import whole_number
from api.manifest import MAX_PRIORITY
from api.request_body import RequestBody
from storage.memory_sizes import MAX_MEMORY_BYTES, parse_memory
from storage.team_quotas import TeamQuota

MAX_CPUS = 1_000_000
MAX_COUNT = 1_000_000
MAX_WEIGHT = 1000.0
GPU_PRODUCT = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$"
# Memory as text: bytes, or a number with a unit, each unit with as many digits as keep it
# within 1 PiB (MAX_MEMORY_BYTES), so that whatever the pattern lets through is a quota.
MEMORY_TEXT = re.compile(
    r"^([0-9]{1,15}B?"
    r"|[0-9]{1,12}(\.[0-9]{1,3})?Ki?[bB]?"
    r"|[0-9]{1,9}(\.[0-9]{1,3})?Mi?[bB]?"
    r"|[0-9]{1,6}(\.[0-9]{1,3})?Gi?[bB]?"
    r"|[0-9]{1,3}(\.[0-9]{1,3})?Ti?[bB]?)$"
)
MEMORY_FORMS = 'bytes up to 1 PiB, or a number with a unit: "64GiB", "512Mi", "100GB", "1Ti"'


def _memory(value: object) -> object:
    """Bytes, or "64GiB"-style text as the manifest's memory takes; 0 is a quota too."""
    if isinstance(value, str):
        if not MEMORY_TEXT.match(value):
            raise ValueError(f"{value[:40]!r} is not understood; use {MEMORY_FORMS}")
        number = re.match(r"[0-9.]+", value)
        if number is not None and float(number.group()) == 0:
            return 0
    elif value == 0 and not isinstance(value, bool):
        return 0
    return None if value is None else parse_memory(value)


Count = Annotated[int, Field(ge=0, le=MAX_COUNT), BeforeValidator(whole_number)]
GpuCounts = Annotated[
    dict[str, Count],
    WithJsonSchema(
        {
            "type": "object",
            "description": 'GPUs by product, e.g. {"A100": 8}',
            "patternProperties": {
                GPU_PRODUCT: {"type": "integer", "minimum": 0, "maximum": MAX_COUNT}
            },
            "additionalProperties": False,
        }
    ),
]
Cpus = Annotated[float, Field(ge=0, le=MAX_CPUS, description="CPUs, e.g. 16 or 0.5")]
Memory = Annotated[
    int | None,
    BeforeValidator(_memory),
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "integer", "minimum": 0, "maximum": MAX_MEMORY_BYTES},
                {"type": "string", "pattern": MEMORY_TEXT.pattern},
                {"type": "null"},
            ],
            "description": MEMORY_FORMS,
        }
    ),
]
Jobs = Annotated[
    int,
    Field(ge=0, le=MAX_COUNT, description="jobs running at once"),
    BeforeValidator(whole_number),
]


def _check_products(gpus: dict[str, int] | None) -> dict[str, int] | None:
    for product in gpus or {}:
        if not re.match(GPU_PRODUCT, product):
            raise ValueError(
                f"{product[:40]!r} is not a GPU product: use letters, digits, '.', '_' or '-', "
                "e.g. A100"
            )
    return gpus


class AmountsBody(RequestBody):
    model_config = ConfigDict(allow_inf_nan=False)

    gpus: Annotated[GpuCounts | None, AfterValidator(_check_products)] = None
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
    max_priority: Annotated[int, Field(ge=0, le=MAX_PRIORITY), BeforeValidator(whole_number)] = (
        Field(0, description="the highest priority the team's jobs may take")
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
