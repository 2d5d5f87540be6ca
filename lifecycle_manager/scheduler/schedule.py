"""One scheduling pass: who starts where, who is preempted, and why everyone else waits.

    pending jobs -- refuse what can never run (FitCheck, quota ceilings)
        |
    queue order (fair_share) -- for each job, each GPU product it may use:
        |   quota (QuotaLedger) -> placement (FreeCapacity) -> admit
        |   else if it ends before that product's reservation: placement in held room
        v
    not admitted -> room from stopping jobs or victims (preemption)
                 -> else the first capacity-blocked job per product reserves (backfill)
                 -> else it waits behind the reservation or for its team's quota

Everything a pass learns that stays true for the rest of the pass is remembered: room
only shrinks and usage only grows while a pass runs, so a gang that found no room, a
team's need its quota refused (until the team admits a job), or a preemption that found
no victims answers the same for every later job of that shape. Once the cluster is full
the remaining jobs cost a few dictionary lookups each.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

from lifecycle_manager.scheduler.backfill import Release, Reservation, reserve
from lifecycle_manager.scheduler.capacity import FitCheck
from lifecycle_manager.scheduler.decisions import (
    Admission,
    Preemption,
    Refusal,
    SchedulePass,
    WaitCause,
    Waiting,
)
from lifecycle_manager.scheduler.estimate import PoolDemand, estimate_starts
from lifecycle_manager.scheduler.explain import (
    behind_reservation_reason,
    holds_reservation_reason,
    preempting_reason,
    quota_reason,
)
from lifecycle_manager.scheduler.fair_share import cluster_totals, dominant_share, order_jobs
from lifecycle_manager.scheduler.model import ClusterSnapshot, Gang, PendingJob
from lifecycle_manager.scheduler.placement import FreeCapacity, Placement, candidate_products
from lifecycle_manager.scheduler.preemption import RunningIndex, plan_room
from lifecycle_manager.scheduler.quota import (
    CPUS,
    MEMORY,
    QuotaBlock,
    QuotaLedger,
    gpu_key,
    need_of,
    products_by_headroom,
)

_FIELD_OF_RESOURCE = {CPUS: "cpus", MEMORY: "memory"}


@dataclass(frozen=True, slots=True)
class _Blocked:
    """Why a job did not start on one product: its quota, or no room."""

    product: str | None
    quota: QuotaBlock | None


class _Pass:
    def __init__(self, cluster: ClusterSnapshot, now: float) -> None:
        self.cluster = cluster
        self.now = now
        self.ledger = QuotaLedger(cluster.teams, cluster.running)
        self.free = FreeCapacity(cluster.nodes)
        for job in cluster.running:
            gang = job.gang
            for name in job.nodes:
                if name in self.free.index:
                    self.free.take(self.free.index[name], gang.gpus, gang.millicpus, gang.memory)
        self.gpu_products = [p for p in self.free.products() if p is not None]
        self.totals = cluster_totals(cluster.nodes)
        self.reservations: dict[str | None, Reservation] = {}
        self.admitted: list[tuple[Admission, PendingJob]] = []
        self.preemptions: list[Preemption] = []
        self.victims: set[str] = set()
        self.refusals: list[Refusal] = []
        self.waiting: list[tuple[PendingJob, WaitCause, str, str | None]] = []
        self._index: RunningIndex | None = None
        self._team_admissions: dict[str, int] = {}
        self._quota_memo: dict[tuple[str, int, tuple[tuple[str, int], ...]], QuotaBlock] = {}
        self._no_room: set[tuple[str | None, Gang, bool]] = set()
        self._no_victims: set[tuple[str, str | None, Gang, int]] = set()

    # -- the pass --------------------------------------------------------------------------

    def run(self) -> SchedulePass:
        fit = FitCheck(self.cluster.nodes)
        queued: list[PendingJob] = []
        for job in self.cluster.pending:
            if job.team not in self.ledger.accounts:
                self.refusals.append(Refusal(job.id, "team", f"team {job.team} does not exist"))
                continue
            refusal = fit.refusal(job) or self._beyond_ceiling(job)
            if refusal is not None:
                self.refusals.append(refusal)
                continue
            queued.append(job)
        self.shares = {
            name: dominant_share(account.used, self.totals) / account.team.weight
            for name, account in self.ledger.accounts.items()
        }
        for job in order_jobs(queued, self.ledger, self.totals, list(self.gpu_products)):
            self._consider(job)
        return SchedulePass(
            tuple(admission for admission, _ in self.admitted),
            tuple(self.preemptions),
            self._waiting_with_estimates(),
            tuple(self.refusals),
        )

    def _consider(self, job: PendingJob) -> None:
        account = self.ledger.accounts[job.team]
        priority = min(job.priority, account.team.max_priority)
        products = candidate_products(job.gang, self.gpu_products)
        if len(products) > 1:
            products = products_by_headroom(account, products)
        blocked: list[_Blocked] = []
        for product in products:
            need = need_of(job.gang, product)
            block = self._quota_block(job.team, need)
            if block is not None:
                blocked.append(_Blocked(product, block))
                continue
            placement, backfilled = self._place(job, product)
            if placement is not None:
                self._admit(job, placement, need, backfilled)
                return
            blocked.append(_Blocked(product, None))
        # explain and act on the product the job came closest on: room, then quota
        first = next((b for b in blocked if b.quota is None), blocked[0])
        if self._make_room(job, priority, first.product):
            return
        if first.quota is not None:
            cause = WaitCause.NO_IDLE_QUOTA if first.quota.no_idle_quota else WaitCause.TEAM_QUOTA
            self.waiting.append((job, cause, quota_reason(job.gang, first.quota), first.product))
            return
        held = self.reservations.get(first.product)
        if held is None:
            held = reserve(
                job.id,
                priority,
                job.gang,
                first.product,
                self.free,
                self._releases(),
                self.now,
            )
            self.reservations[first.product] = held
            reason = holds_reservation_reason(job.gang, first.product, held.start)
            self.waiting.append((job, WaitCause.CAPACITY, reason, first.product))
            return
        reason = behind_reservation_reason(held.job_id, held.priority, first.product)
        self.waiting.append((job, WaitCause.RESERVATION, reason, first.product))

    # -- quota and room --------------------------------------------------------------------

    def _beyond_ceiling(self, job: PendingJob) -> Refusal | None:
        """Refuse a job that exceeds its team's nominal quota plus borrowing limit alone,
        on every product it could use."""
        resources = []
        for product in candidate_products(job.gang, self.gpu_products):
            resource = self.ledger.beyond_ceiling(job.team, need_of(job.gang, product))
            if resource is None:
                return None
            resources.append(resource)
        if not resources:
            return None
        resource = resources[0]
        field = _FIELD_OF_RESOURCE.get(resource, "gpus" if resource.startswith("gpus") else "team")
        ceiling = self.ledger.accounts[job.team].ceiling_of(resource)
        return Refusal(
            job.id,
            field,
            f"needs more {resource.removeprefix('gpus:')} than team {job.team} may ever use "
            f"({ceiling:g}: its nominal quota plus borrowing limit)",
        )

    def _quota_block(self, team: str, need: tuple[tuple[str, int], ...]) -> QuotaBlock | None:
        key = (team, self._team_admissions.get(team, 0), need)
        block = self._quota_memo.get(key)
        if block is None:
            block = self.ledger.block(team, need)
            if block is not None:
                self._quota_memo[key] = block
        return block

    def _place(self, job: PendingJob, product: str | None) -> tuple[Placement | None, bool]:
        """A placement in free room, or in held room for a job that ends in time; and
        whether it went ahead of a reservation."""
        held = self.reservations.get(product)
        if (product, job.gang, False) not in self._no_room:
            placement = self.free.place(job.gang, product)
            if placement is not None:
                return placement, held is not None
            self._no_room.add((product, job.gang, False))
        runtime = job.estimated_runtime_s
        if held is None or runtime is None or not held.ends_in_time(self.now + runtime):
            return None, False
        if (product, job.gang, True) in self._no_room:
            return None, False
        placement = held.place_short(self.free, job.gang, product)
        if placement is None:
            self._no_room.add((product, job.gang, True))
        return placement, placement is not None

    def _admit(
        self,
        job: PendingJob,
        placement: Placement,
        need: tuple[tuple[str, int], ...],
        backfilled: bool,
    ) -> None:
        account = self.ledger.accounts[job.team]
        borrowed = not account.within_nominal(need)
        self.ledger.add(job.team, need)
        self._team_admissions[job.team] = self._team_admissions.get(job.team, 0) + 1
        admission = Admission(
            job.id, job.team, placement.nodes, placement.gpu_product, borrowed, backfilled
        )
        self.admitted.append((admission, job))

    def _make_room(self, job: PendingJob, priority: int, product: str | None) -> bool:
        memo = (job.team, product, job.gang, priority)
        if memo in self._no_victims:
            return False
        if self._index is None:
            self._index = RunningIndex(self.cluster.running, self.now)
        plan = plan_room(job, priority, product, self.free, self.ledger, self._index, self.shares)
        if plan is None:
            self._no_victims.add(memo)
            return False
        for victim in plan.victims:
            self.victims.add(victim.job.id)
            self.preemptions.append(
                Preemption(victim.job.id, victim.job.team, job.id, victim.reason)
            )
        reason = preempting_reason([v.job for v in plan.victims], list(plan.claimed))
        self.waiting.append((job, WaitCause.PREEMPTING, reason, product))
        return True

    # -- what running jobs will free -------------------------------------------------------

    def _holders(self) -> list[_Holder]:
        """Jobs holding room after this pass, with their estimated ends: running jobs
        not chosen as victims (a stopping one ends now) and the admitted ones."""
        taken = self._index.taken if self._index is not None else set()
        holders: list[_Holder] = []
        for running in self.cluster.running:
            if running.id in taken:
                continue
            end = self.now if running.stopping else running.estimated_end()
            holders.append(
                _Holder(running.gang, running.gpu_product, running.nodes, _end_after(end, self.now))
            )
        for admission, pending in self.admitted:
            runtime = pending.estimated_runtime_s
            end = None if runtime is None else self.now + runtime
            holders.append(
                _Holder(
                    pending.gang, admission.gpu_product, admission.nodes, _end_after(end, self.now)
                )
            )
        return holders

    def _releases(self) -> list[Release]:
        index = self.free.index
        releases: list[Release] = []
        for holder in self._holders():
            gang = holder.gang
            room = (gang.gpus, gang.millicpus, gang.memory)
            releases.extend(
                Release(holder.end, index[name], room) for name in holder.nodes if name in index
            )
        return releases

    # -- estimates -------------------------------------------------------------------------

    def _waiting_with_estimates(self) -> tuple[Waiting, ...]:
        demands = []
        for job, cause, _, product in self.waiting:
            held = self.reservations.get(product)
            known = held.start if held is not None and held.job_id == job.id else None
            if cause is WaitCause.PREEMPTING:
                known = self.now
            demands.append(
                PoolDemand(
                    _pool(job.gang, product),
                    _pool_amount(job.gang),
                    job.estimated_runtime_s,
                    known,
                )
            )
        free_by_pool: dict[str, int] = {}
        for i, product in enumerate(self.free.product):
            if product is not None:
                pool = gpu_key(product)
                free_by_pool[pool] = free_by_pool.get(pool, 0) + self.free.gpus[i]
            free_by_pool[CPUS] = free_by_pool.get(CPUS, 0) + self.free.millicpus[i]
        # held room is free room too, promised to the head, which comes first in the queue
        for held in self.reservations.values():
            for i, (gpus, millicpus, _) in held.holds.items():
                product = self.free.product[i]
                if product is not None:
                    free_by_pool[gpu_key(product)] += gpus
                free_by_pool[CPUS] += millicpus
        releases = [
            (_pool(h.gang, h.gpu_product), h.end, _pool_amount(h.gang)) for h in self._holders()
        ]
        starts = estimate_starts(demands, free_by_pool, releases, self.now)
        return tuple(
            Waiting(job.id, position, cause, reason, start)
            for position, ((job, cause, reason, _), start) in enumerate(
                zip(self.waiting, starts, strict=True), start=1
            )
        )


class _Holder(NamedTuple):
    gang: Gang
    gpu_product: str | None
    nodes: tuple[str, ...]
    end: float  # math.inf when unknown


def _end_after(end: float | None, now: float) -> float:
    """An estimated end for planning: never before now, infinite when unknown."""
    return math.inf if end is None else max(end, now)


def _pool(gang: Gang, product: str | None) -> str:
    return gpu_key(product) if gang.gpus else CPUS


def _pool_amount(gang: Gang) -> int:
    return gang.learners * (gang.gpus or gang.millicpus)


def schedule(cluster: ClusterSnapshot, now: float) -> SchedulePass:
    """One pass over `cluster` at time `now`: admissions, preemptions, refusals, and every
    other pending job's reason, queue position and estimated start."""
    return _Pass(cluster, now).run()
