"""Refuse at submission a job its team may never run: one that alone asks more than the
team's quota plus its borrowing limit, on every GPU product the cluster has.

The scheduler would leave such a job queued with that reason for good; the submitter learns
it at once, with the field to change. Amounts not limited (None) never refuse; with no
published nodes the GPU products are not known and GPUs are not checked.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from api.errors import Invalid
from api.manifest import Manifest
from api.services.node_fit import memory_size
from api.state import ApiState
from storage.cluster_nodes import NodeCapacity, anodes
from storage.counted import counted
from storage.models import Team
from storage.team_quotas import TeamQuota, quota_of

RAISE = "a platform admin raises the team's quota (`dlaas team quota`)"


@dataclass(frozen=True)
class Ask:
    """What a job needs of its team's quota at once."""

    learners: int
    learners_field: str  # the manifest field that sets `learners`
    gpus: int  # per learner
    millicpus: int  # per learner
    memory: int  # per learner, bytes


def _ceiling(nominal: int | None, borrowing: int | None) -> int | None:
    if nominal is None or borrowing is None:
        return None
    return nominal + borrowing


def _gpu_ceiling(quota: TeamQuota, product: str) -> int | None:
    nominal = None if quota.gpus is None else quota.gpus.get(product, 0)
    borrowing = None if quota.borrow_gpus is None else quota.borrow_gpus.get(product, 0)
    return _ceiling(nominal, borrowing)


def _beyond(ask: Ask, total: str, ceiling: str, quota: TeamQuota) -> str:
    learners = counted(ask.learners, "learner")
    if ask.learners_field != "learners":
        learners += f" ({ask.learners_field})"
    return (
        f"{learners} need {total} at once, more than team {quota.team} may ever use "
        f"({ceiling}: its quota plus its borrowing limit); ask for less, or {RAISE}"
    )


def refusal(quota: TeamQuota, ask: Ask, products: Sequence[str]) -> tuple[str, str] | None:
    """The manifest field to change, and why, when the team may never run the job."""
    jobs = _ceiling(quota.jobs, quota.borrow_jobs)
    if jobs is not None and jobs < 1:
        return "team", (
            f"team {quota.team} may run no job at all (its quota of concurrent jobs plus its "
            f"borrowing limit is 0): submit to another team (`dlaas train --team`), or {RAISE}"
        )
    if ask.gpus and products:
        ceilings = [_gpu_ceiling(quota, product) for product in products]
        limited = [c for c in ceilings if c is not None]
        gpus = ask.learners * ask.gpus
        if len(limited) == len(ceilings) and gpus > max(limited):
            most, product = max(zip(limited, products, strict=True))
            return "gpus", _beyond(ask, counted(gpus, "GPU"), f"{most} {product}", quota)
    cpus = _ceiling(quota.millicpus, quota.borrow_millicpus)
    if cpus is not None and ask.learners * ask.millicpus > cpus:
        total = f"{ask.learners * ask.millicpus / 1000:g} CPUs"
        return "cpus", _beyond(ask, total, f"{cpus / 1000:g} CPUs", quota)
    memory = _ceiling(quota.memory, quota.borrow_memory)
    if memory is not None and ask.learners * ask.memory > memory:
        total = f"{memory_size(ask.learners * ask.memory)} of memory"
        return "memory", _beyond(ask, total, memory_size(memory, at_most=True), quota)
    return None


def _products(nodes: Sequence[NodeCapacity] | None) -> list[str]:
    known = nodes or ()
    return sorted({node.gpu_product for node in known if node.gpus and node.gpu_product})


async def check_team_fits(state: ApiState, team_id: int, manifest: Manifest) -> None:
    """Raise `Invalid` (`beyond_team_quota`) naming the field when the team may never run
    the job."""
    async with state.sessions() as session:
        team = await session.get(Team, team_id)
        if team is None:
            return
        quota = quota_of(team)
    elastic = manifest.elastic
    ask = Ask(
        learners=elastic.min_learners if elastic else manifest.learners,
        learners_field="elastic.min_learners" if elastic else "learners",
        gpus=manifest.gpus,
        millicpus=round(manifest.cpus * 1000),
        memory=manifest.memory,
    )
    found = refusal(quota, ask, _products(await anodes(state.redis)))
    if found is not None:
        field, detail = found
        raise Invalid(detail, code="beyond_team_quota", field=field)
