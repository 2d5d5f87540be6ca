"""The reasons a waiting job shows its user, in the words of `dlaas queue`."""

from __future__ import annotations

import math

from lifecycle_manager.scheduler.amounts import (
    describe_gang,
    describe_memory,
    describe_millicpus,
)
from lifecycle_manager.scheduler.model import Gang, RunningJob
from lifecycle_manager.scheduler.quota import CPUS, JOBS, MEMORY, QuotaBlock
from storage.counted import counted

Quantity = int | float


def _amount(resource: str, amount: Quantity) -> str:
    if resource == CPUS:
        return describe_millicpus(int(amount))
    if resource == MEMORY:
        return describe_memory(int(amount))
    return f"{amount:g}"


def _what(resource: str) -> str:
    if resource == CPUS:
        return "CPU"
    if resource == MEMORY:
        return "memory"
    if resource == JOBS:
        return "concurrent job"
    return f"{resource.removeprefix('gpus:')} GPU"


def _needs(gang: Gang, block: QuotaBlock) -> str:
    if block.resource == CPUS:
        return describe_millicpus(block.need)
    if block.resource == MEMORY:
        return describe_memory(block.need)
    return describe_gang(gang.learners, gang.gpus, block.resource.removeprefix("gpus:"))


def held_quota_reason(gang: Gang, resource: str, holder: str) -> str:
    """e.g. "needs 4 GPUs (A100) beyond its team's nominal quota; the idle A100 GPU quota
    is kept for job j7, first in the fair order"."""
    needs = describe_gang(gang.learners, gang.gpus, resource.removeprefix("gpus:"))
    return (
        f"needs {needs} beyond its team's nominal quota; the idle {_what(resource)} quota "
        f"is kept for job {holder}, first in the fair order"
    )


def team_hold_reason(holder: str, block: QuotaBlock) -> str:
    """e.g. "waiting behind job j3 of the same team, which needs 64 A100 GPUs of the
    team's 64 and starts once the team's running jobs give them back"."""
    return (
        f"waiting behind job {holder} of the same team, which needs {block.need:g} "
        f"{_what(block.resource)}s of the team's {block.nominal:g} and starts once the "
        "team's running jobs give them back"
    )


def _jobs_held(team: str, used: float, nominal: float) -> str:
    """e.g. "team ta runs 2 jobs at once, 1 of them borrowed beyond its quota of 1"."""
    running = f"{team} runs {counted(round(used), 'job')} at once"
    if used > nominal:
        return f"{running}, {used - nominal:g} of them borrowed beyond its quota of {nominal:g}"
    return f"{running}, as many as its quota of {counted(round(nominal), 'concurrent job')} allows"


def quota_reason(gang: Gang, block: QuotaBlock) -> str:
    """e.g. "needs 4 GPUs (A100); team vision has 2 of its 8 free, borrowing limit reached"."""
    team = f"team {block.team}"
    nominal, used = block.nominal, block.used
    free = max(nominal - used, 0)
    if block.resource == JOBS:
        have = _jobs_held(team, used, nominal)
    elif block.resource in (CPUS, MEMORY):
        have = (
            f"needs {_needs(gang, block)}; {team} has {_amount(block.resource, free)} of its "
            f"{_amount(block.resource, nominal)} free"
        )
    else:
        have = f"needs {_needs(gang, block)}; {team} has {free:g} of its {nominal:g} free"
    if block.no_idle_quota:
        return f"{have}, and other teams have no idle {_what(block.resource)} quota to lend"
    if block.ceiling <= nominal:
        return have if block.resource == JOBS else f"{have}, and it may not borrow"
    borrowed = max(used - nominal, 0)
    limit = block.ceiling - nominal
    if math.isinf(limit):
        return f"{have}, borrowing limit reached"
    return (
        f"{have}, borrowing limit reached ({_amount(block.resource, borrowed)} of "
        f"{_amount(block.resource, limit)} borrowed)"
    )


def holds_reservation_reason(gang: Gang, product: str | None, start: float | None) -> str:
    needs = describe_gang(gang.learners, gang.gpus, product) if gang.gpus else "its CPUs"
    if start is None:
        return (
            f"needs {needs} on free nodes; none has room now and it holds the reservation, "
            "but the running jobs in its way have no estimated end"
        )
    return (
        f"needs {needs} on free nodes; none has room now, so it holds the reservation "
        "for the room running jobs free as they end"
    )


def behind_reservation_reason(holder: str, priority: int, product: str | None) -> str:
    what = f" for {product} GPUs" if product else ""
    return f"waiting behind job {holder} (priority {priority}) which holds the reservation{what}"


def preempting_reason(victims: list[RunningJob], claimed: list[RunningJob]) -> str:
    jobs = victims or claimed
    ids = ", ".join(job.id for job in jobs)
    one = len(jobs) == 1
    stops = "it checkpoints and stops" if one else "they checkpoint and stop"
    if victims:
        return f"preempting {ids} to make room; starts once {stops}"
    whose = "its" if one else "their"
    return f"waiting for {ids} to checkpoint and stop; {whose} room goes to this job"
