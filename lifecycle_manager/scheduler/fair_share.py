"""The queue's order: guaranteed quota first, then priority, then weighted DRF, then FIFO.

Each team's jobs line up by priority (capped at the team's `max_priority`), oldest first
within a priority. Walking that line, each job is charged to its team as if everything
ahead of it in the team had started, which gives it two things:

- whether it would still be within the team's nominal quota; those jobs go first, since
  they would reclaim borrowed resources anyway;
- its team's weighted dominant share (DRF): the largest fraction of any cluster resource
  (GPUs of a product, CPUs, memory) the team would hold, divided by the team's weight.
  Among jobs of equal priority, the lowest share goes next, so teams that want more than
  their share take turns in proportion to their weights.

Ties go to the older job. The order is a plain sort over those keys.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping

from lifecycle_manager.scheduler.model import ClusterSnapshot, Gang, Node, PendingJob
from lifecycle_manager.scheduler.quota import (
    CPUS,
    MEMORY,
    QuotaLedger,
    gpu_key,
    need_of,
    products_by_headroom,
)


def cluster_totals(nodes: Iterable[Node]) -> dict[str, float]:
    """The cluster's amount of each shareable resource (the DRF denominators)."""
    totals: dict[str, float] = defaultdict(float)
    for node in nodes:
        if node.gpus:
            totals[gpu_key(node.gpu_product)] += node.gpus
        totals[CPUS] += node.millicpus
        totals[MEMORY] += node.memory
    return {key: value for key, value in totals.items() if value > 0}


def dominant_share(used: Mapping[str, float], totals: Mapping[str, float]) -> float:
    """The largest fraction of any cluster resource `used` holds."""
    return max((used.get(key, 0) / total for key, total in totals.items()), default=0.0)


def order_jobs(
    jobs: Iterable[PendingJob],
    ledger: QuotaLedger,
    totals: Mapping[str, float],
    gpu_products: list[str | None],
) -> list[PendingJob]:
    """`jobs` (all of teams the ledger knows) in the order a pass considers them."""
    by_team: dict[str, list[PendingJob]] = defaultdict(list)
    for job in jobs:
        by_team[job.team].append(job)
    keyed: list[tuple[bool, int, float, float, str, int]] = []
    ordered: list[PendingJob] = []
    for team, queued in by_team.items():
        account = ledger.accounts[team]
        cap = account.team.max_priority
        weight = account.team.weight
        queued.sort(key=lambda j: (-min(j.priority, cap), j.submitted_at, j.id))
        # a job that names no product is charged where the team has most quota left
        default_product = (products_by_headroom(account, gpu_products) or [None])[0]
        used = dict(account.used)
        share = dominant_share(used, totals)
        # per gang: (resource, amount, the cluster's total of it or 0, the team's nominal)
        charges: dict[Gang, list[tuple[str, int, float, float]]] = {}
        for job in queued:
            charge = charges.get(job.gang)
            if charge is None:
                charge = charges[job.gang] = [
                    (key, amount, totals.get(key, 0.0), account.nominal_of(key))
                    for key, amount in need_of(job.gang, job.gang.gpu_product or default_product)
                ]
            borrows = False
            for key, amount, total, nominal in charge:
                now_used = used.get(key, 0) + amount
                used[key] = now_used
                if now_used > nominal:
                    borrows = True
                if total and now_used / total > share:
                    share = now_used / total
            keyed.append(
                (
                    borrows,
                    -min(job.priority, cap),
                    share / weight,
                    job.submitted_at,
                    job.id,
                    len(ordered),
                )
            )
            ordered.append(job)
    keyed.sort()
    return [ordered[k[5]] for k in keyed]


def queue_order(cluster: ClusterSnapshot) -> list[PendingJob]:
    """The pending jobs of known teams in the order the scheduler considers them."""
    ledger = QuotaLedger(cluster.teams, cluster.running)
    products = sorted({n.gpu_product for n in cluster.nodes if n.gpus}, key=str)
    known = [job for job in cluster.pending if job.team in ledger.accounts]
    return order_jobs(known, ledger, cluster_totals(cluster.nodes), list(products))
