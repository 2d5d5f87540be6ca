"""The queue's order: guaranteed quota first, then priority, then weighted DRF, then FIFO.

Each team's jobs line up by priority (capped at the team's `max_priority`), oldest first
within a priority. The teams' lines are merged by the key of each line's first job:

- whether the job fits in what its team has left of its nominal quota; such jobs go
  first, since they would reclaim borrowed resources anyway (a job keyed by its team's
  standing alone, one that needs more than its team has left, went first too, borrowed
  the room an owner's reclaim had just freed, and was preempted again: a livelock);
- the job's priority;
- its team's weighted dominant share (DRF): the largest fraction of any cluster resource
  (GPUs of a product, CPUs, memory) the team holds, divided by the team's weight. The
  lowest share goes next, so teams that want more than their share take turns in
  proportion to their weights;
- the older job first.

The share is the team's standing, not the job's: a team's large gang at the head of its line
does not push its later jobs (which its quota may still cover) behind the borrowing of
teams with smaller jobs, and a team with large jobs is not kept below its share because
each of its jobs, added to what it holds, looks large.

A team is charged only for what it is actually granted: a pass charges the jobs it admits,
so a team whose first job is stuck (a gang too big for the room) keeps its low share and
its next jobs keep their turn. `queue_order` charges every job as it comes up: the order
if each job could start in turn.
"""

from __future__ import annotations

import heapq
import operator
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping

from lifecycle_manager.scheduler.model import ClusterSnapshot, Gang, Node, PendingJob
from lifecycle_manager.scheduler.quota import (
    CPUS,
    MEMORY,
    QuotaLedger,
    TeamAccount,
    gpu_key,
    need_of,
    products_by_headroom,
    taken_from,
)

# (borrows, -priority, weighted share, submitted_at, job id, team)
_Key = tuple[bool, int, float, float, str, str]


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


class _TeamLine:
    """One team's jobs in order, and the key of the next one."""

    def __init__(
        self,
        account: TeamAccount,
        jobs: list[PendingJob],
        totals: Mapping[str, float],
        gpu_products: list[str | None],
    ) -> None:
        self.account = account
        self.name = account.team.name
        cap = self.cap = account.team.max_priority
        # by priority (capped), oldest first within one: two stable sorts, keyed in C
        jobs.sort(key=_BY_AGE)
        if any(job.priority > cap for job in jobs):
            jobs.sort(key=lambda job: min(job.priority, cap), reverse=True)
        else:
            jobs.sort(key=_BY_PRIORITY, reverse=True)
        self.jobs = jobs
        self.next = 0
        self.totals = totals
        # a job that names no product is charged where the team has most quota left
        self.default_product = (products_by_headroom(account, gpu_products) or [None])[0]
        self._version = -1
        self._by_gang: dict[Gang, tuple[bool, float]] = {}
        self._share: float | None = None

    def key(self) -> _Key:
        account = self.account
        if account.version != self._version:
            self._version = account.version
            self._by_gang.clear()
            self._share = None
        job = self.jobs[self.next]
        known = self._known(job)
        if known[0]:
            known = self._within_nominal_first(job, known)
            job = self.jobs[self.next]
        priority = job.priority
        return (
            known[0],
            -(priority if priority <= self.cap else self.cap),
            known[1],
            job.submitted_at,
            job.id,
            self.name,
        )

    def _known(self, job: PendingJob) -> tuple[bool, float]:
        """Whether `job` would borrow, and the team's weighted share."""
        known = self._by_gang.get(job.gang)
        if known is None:
            account = self.account
            used, nominal = account.used, account.nominal
            if self._share is None:
                self._share = dominant_share(used, self.totals) / account.team.weight
            # the job would take the team past its nominal quota of something it needs
            borrows = any(
                amount > 0 and used.get(key, 0) + amount > nominal.get(key, 0)
                for key, amount in need_of(job.gang, job.gang.gpu_product or self.default_product)
            )
            known = self._by_gang[job.gang] = (borrows, self._share)
        return known

    def _within_nominal_first(
        self, head: PendingJob, known: tuple[bool, float]
    ) -> tuple[bool, float]:
        """Bring ahead of a head that borrows whatever its team runs (it needs more than
        the team's nominal quota of something) the first of the next few jobs of its
        priority that would not borrow: keyed by the borrower, the team's guaranteed job
        waited behind every other team's borrowers, and one of them took the room the
        team's reclaim had freed. A teammate of lower priority only if it runs on other
        resources than the borrower (another GPU product, or GPUs against none): one on
        the same could be preempted by the borrower for the room it took. And not ahead
        of a head the team's own jobs keep from its quota: that one goes first, or the
        team's small jobs would starve it."""
        jobs, cap = self.jobs, self.cap
        level = min(head.priority, cap)
        nominal = self.account.nominal
        product = head.gang.gpu_product or self.default_product
        if all(amount <= nominal.get(key, 0) for key, amount in need_of(head.gang, product)):
            return known
        takes_from = _victims_resource(head)
        for k in range(self.next + 1, min(self.next + 1 + WITHIN_NOMINAL_LOOKAHEAD, len(jobs))):
            job = jobs[k]
            if min(job.priority, cap) != level:
                resource = _victims_resource(job)
                if takes_from is None or resource is None or resource == takes_from:
                    continue
            candidate = self._known(job)
            if not candidate[0]:
                jobs.insert(self.next, jobs.pop(k))
                return candidate
        return known


def _victims_resource(job: PendingJob) -> str | None:
    """The resource whose running jobs `job` may preempt (`taken_from`); None if it may
    run on any GPU product."""
    gang = job.gang
    if gang.gpus and gang.gpu_product is None:
        return None
    return taken_from(gang.gpus, gang.gpu_product)


# how far down its line a team's first job that would not borrow is looked for
WITHIN_NOMINAL_LOOKAHEAD = 32

_BY_AGE = operator.attrgetter("submitted_at", "id")
_BY_PRIORITY = operator.attrgetter("priority")


def fair_order(
    jobs: Iterable[PendingJob],
    ledger: QuotaLedger,
    totals: Mapping[str, float],
    gpu_products: list[str | None],
    charge_each: bool = False,
) -> Iterator[PendingJob]:
    """`jobs` (of teams the ledger knows) one at a time in fair order. Each key is
    worked out from the ledger when the job comes up, after the caller has acted on the
    previous one (and charged it, if it started); `charge_each` charges every job."""
    by_team: dict[str, list[PendingJob]] = defaultdict(list)
    for job in jobs:
        by_team[job.team].append(job)
    lines = {
        team: _TeamLine(ledger.accounts[team], queued, totals, gpu_products)
        for team, queued in by_team.items()
    }
    heap = [line.key() for line in lines.values()]
    heapq.heapify(heap)
    while heap:
        line = lines[heap[0][5]]
        job = line.jobs[line.next]
        yield job
        if charge_each:
            product = job.gang.gpu_product or line.default_product
            ledger.add(job.team, need_of(job.gang, product))
        line.next += 1
        if line.next == len(line.jobs):
            heapq.heappop(heap)
            continue
        key = line.key()
        # most often the same team stays first: then the heap needs no reordering
        if (len(heap) < 2 or key <= heap[1]) and (len(heap) < 3 or key <= heap[2]):
            heap[0] = key
        else:
            heapq.heapreplace(heap, key)


def queue_order(cluster: ClusterSnapshot) -> list[PendingJob]:
    """The pending jobs of known teams in the order they would start if each could start
    as its turn came."""
    ledger = QuotaLedger(cluster.teams, cluster.running)
    products = sorted({n.gpu_product for n in cluster.nodes if n.gpus}, key=str)
    known = [job for job in cluster.pending if job.team in ledger.accounts]
    totals = cluster_totals(cluster.nodes)
    return list(fair_order(known, ledger, totals, list(products), charge_each=True))
