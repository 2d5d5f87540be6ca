"""One scheduling pass: who starts where, who is preempted, and why everyone else waits.

    pending jobs -- refuse what can never run (FitCheck, quota ceilings)
        |
    queue order (fair_share) -- for each job, each GPU product it may use:
        |   quota (QuotaLedger) -> placement (FreeCapacity) -> admit
        |   else if it ends before that product's reservation: placement in held room
        v
    not admitted -> room from stopping jobs or victims (preemption)
                 -> else the first capacity-blocked job per product reserves (backfill)
                 -> else it waits behind the reservation or for its team's quota; a
                    team's first job waiting for its own team's jobs to give back the
                    team's quota holds it: the team's later jobs wait behind it unless
                    they end first (backfill within the team's quota)

Everything a pass learns that stays true for the rest of the pass is remembered: room
only shrinks and usage only grows while a pass runs, so a gang that found no room, a
team's need its quota refused (until the team admits a job), or a preemption that found
no victims answers the same for every later job of that shape. Once the cluster is full
the remaining jobs cost a few dictionary lookups each.
"""

from __future__ import annotations

import contextlib
import gc
import math
from collections.abc import Iterator

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
from lifecycle_manager.scheduler.estimate import estimated_starts
from lifecycle_manager.scheduler.explain import (
    behind_reservation_reason,
    held_quota_reason,
    holds_reservation_reason,
    preempting_reason,
    quota_reason,
    team_hold_reason,
)
from lifecycle_manager.scheduler.fair_share import cluster_totals, dominant_share, fair_order
from lifecycle_manager.scheduler.job_shapes import GangFacts, TeamShape
from lifecycle_manager.scheduler.model import ClusterSnapshot, Gang, PendingJob, RunningJob
from lifecycle_manager.scheduler.placement import FreeCapacity, Placement
from lifecycle_manager.scheduler.preemption import RunningIndex, plan_room
from lifecycle_manager.scheduler.quota import (
    CPUS,
    Need,
    QuotaBlock,
    QuotaLedger,
    gpu_key,
    idle_quota_kept,
    need_of,
    products_by_headroom,
    taken_from,
)


class _Pass:
    def __init__(self, cluster: ClusterSnapshot, now: float) -> None:
        self.cluster = cluster
        self.now = now
        self.ledger = QuotaLedger(cluster.teams, cluster.running)
        self.free = FreeCapacity(cluster.nodes)
        # per node, what running learners hold there, taken at once; in the order of each
        # node's last learner with GPUs, as taking them one by one would leave the buckets
        # (best fit breaks ties by that order)
        held: dict[int, list[int]] = {}
        index = self.free.index
        for job in cluster.running:
            gang = job.gang
            for name in job.nodes:
                i = index.get(name)
                if i is None:
                    continue
                room = held.pop(i, None) if gang.gpus else held.get(i)
                if room is None:
                    room = [0, 0, 0]
                room[0] += gang.gpus
                room[1] += gang.millicpus
                room[2] += gang.memory
                held[i] = room
        for i, (gpus, millicpus, memory) in held.items():
            self.free.take(i, gpus, millicpus, memory)
        self.gpu_products = [p for p in self.free.products() if p is not None]
        self.totals = cluster_totals(cluster.nodes)
        self.ledger.capacity = self.totals
        self.reservations: dict[str | None, Reservation] = {}
        self._latest_start = -math.inf  # of the reservations: no job ending later backfills
        self.admitted: list[tuple[Admission, PendingJob]] = []
        self.preemptions: list[Preemption] = []
        self.refusals: list[Refusal] = []
        # (job, its gang's facts, cause, reason, the product it waits for)
        self.waiting: list[tuple[PendingJob, GangFacts, WaitCause, str, str | None]] = []
        self._fit = FitCheck(cluster.nodes)
        self._gangs: dict[Gang, GangFacts] = {}
        self._shapes: dict[tuple[str, Gang], TeamShape] = {}
        self._team_admissions: dict[str, int] = {}
        self._all_admissions = 0  # any team's: the teams' usage together only grows with it
        # changes to what a later job's wait could depend on: admissions, reservations,
        # preemption tries and plans, quota holds (see TeamShape.room_wait)
        self._changes = 0
        self._index: RunningIndex | None = None
        self._planned: QuotaLedger | None = None
        # per team and product: the gangs whose preemption failed, _SUCCEEDED for others
        self._room_tried: dict[tuple[str, str | None], list[Gang]] = {}
        self._room_tries = 0
        # (job id, what it gives back) of the running jobs, in all and per GPU product of
        # the nodes it runs on
        self._running_releases: list[tuple[str, Release]] | None = None
        self._running_releases_on: dict[str | None, list[tuple[str, Release]]] = {}
        # per GPU resource: the job (id, team) the idle quota is kept for, see _hold_quota
        self._quota_holds: dict[str, tuple[str, str]] = {}
        # per GPU resource: (team, need) of the first job to wait for idle quota of it
        self._idle_quota_waiters: dict[str, tuple[str, int]] = {}
        # (team, resource) of the jobs that wait at their team's ceiling, see _wait_for_quota
        self._at_ceiling: set[tuple[str, str]] = set()
        # per team: (priority, reason, estimated start, resource) of its first job waiting
        # for the team's own jobs to give back its nominal quota, see _hold_team_quota
        self._team_holds: dict[str, tuple[int, str, float, str]] = {}
        self._running_of_team: dict[str, list[RunningJob]] | None = None
        # the earliest estimated end of any running job, and of each team's, see _known_start
        self._first_ends: dict[str, float] | None = None
        self._first_end = math.inf
        self._admitted_of_team: dict[str, list[tuple[Admission, PendingJob]]] = {}

    # -- the pass --------------------------------------------------------------------------

    def run(self) -> SchedulePass:
        queued: list[PendingJob] = []
        shape_of: dict[str, TeamShape] = {}
        for job in self.cluster.pending:
            if job.team not in self.ledger.accounts:
                self.refusals.append(Refusal(job.id, "team", f"team {job.team} does not exist"))
                continue
            shape = shape_of[job.id] = self._shape(job)
            if shape.never is not None:
                self.refusals.append(Refusal(job.id, *shape.never))
                continue
            queued.append(job)
        self._claim_for_hidden_owners(queued, shape_of)
        self.shares = {
            name: dominant_share(account.used, self.totals) / account.team.weight
            for name, account in self.ledger.accounts.items()
        }
        admissions, waiting = self._team_admissions, self.waiting
        for job in fair_order(queued, self.ledger, self.totals, list(self.gpu_products)):
            shape = shape_of[job.id]
            quota_wait = shape.quota_wait
            if quota_wait is not None and quota_wait[0] == admissions.get(job.team, 0):
                # waits for quota as the last such job did, the team having admitted none since
                waiting.append((job, shape.facts, quota_wait[1], quota_wait[2], quota_wait[3]))
                continue
            self._consider(job, shape)
        return SchedulePass(
            tuple(admission for admission, _ in self.admitted),
            tuple(self.preemptions),
            self._waiting_with_estimates(),
            tuple(self.refusals),
        )

    def _claim_for_hidden_owners(
        self, queued: list[PendingJob], shape_of: dict[str, TeamShape]
    ) -> None:
        """Claim the quota of a team's jobs within its nominal quota that queue behind a
        teammate of higher priority that can only borrow, on the same resource (it may
        not go ahead of that one, see fair_share): another team's borrower that came
        between took the room such a job had just reclaimed, and was preempted for it
        again, pass after pass. Other teams may not borrow that quota while it waits."""
        ledger = self.ledger
        borrower_priority: dict[tuple[str, str], int] = {}
        owners: list[tuple[PendingJob, str, Need, int]] = []
        for job in queued:
            gang = job.gang
            account = ledger.accounts[job.team]
            product = gang.gpu_product
            if gang.gpus and product is None:
                # one that names no product where its team has most quota left
                products = shape_of[job.id].facts.products
                if not products:
                    continue
                product = products_by_headroom(account, products)[0]
            resource = taken_from(gang.gpus, product)
            need = need_of(gang, product)
            priority = min(job.priority, account.team.max_priority)
            nominal = account.nominal
            if any(amount > nominal.get(key, 0) for key, amount in need):
                key = (job.team, resource)
                borrower_priority[key] = max(priority, borrower_priority.get(key, priority))
            else:
                owners.append((job, resource, need, priority))
        if not borrower_priority:
            return
        for job, resource, need, priority in owners:
            if priority < borrower_priority.get((job.team, resource), priority):
                ledger.claim(job.team, need)

    def _shape(self, job: PendingJob) -> TeamShape:
        key = (job.team, job.gang)
        shape = self._shapes.get(key)
        if shape is None:
            facts = self._gangs.get(job.gang)
            if facts is None:
                facts = GangFacts(job.gang, self.gpu_products, self._fit.why_not(job.gang))
                self._gangs[job.gang] = facts
            shape = self._shapes[key] = TeamShape(job.team, facts, self.ledger)
        return shape

    def _consider(self, job: PendingJob, shape: TeamShape) -> None:
        facts = shape.facts
        account = self.ledger.accounts[job.team]
        priority = min(job.priority, account.team.max_priority)
        if self._team_holds and self._held_for_teammate(job, facts, priority):
            return
        changes = self._changes
        room_wait = shape.room_wait
        if (
            room_wait is not None
            and room_wait[0] == changes
            and room_wait[1] == priority
            and not self._may_backfill(job, facts)
        ):
            self.waiting.append((job, facts, room_wait[2], room_wait[3], room_wait[4]))
            return
        products = facts.products
        if len(products) > 1:
            products = products_by_headroom(account, products)
        quota_blocked: list[tuple[str | None, QuotaBlock]] = []
        no_room: list[str | None] = []
        held_for: list[tuple[str | None, str, str]] = []
        for product in products:
            need = facts.needs[product]
            block = self._quota_block(job.team, shape, product, need)
            if block is None and self._quota_holds:
                hold = self._held_from(job.team, need)
                if hold is not None:
                    held_for.append((product, *hold))
                    continue
            if block is not None and not _guaranteed(block):
                quota_blocked.append((product, block))
                continue
            if block is not None:
                # within its nominal quota, it waits only for borrowers to give back room:
                # it may reclaim, and it may hold the reservation like a job with no room
                no_room.append(product)
                continue
            placement, backfilled = self._place(job, facts, product)
            if placement is not None:
                self._admit(job, placement, need, backfilled)
                return
            no_room.append(product)
        # act on and explain the product the job came closest on: room, then quota
        if no_room:
            product = no_room[0]
            if self._make_room(job, facts, priority, product, own_team_only=False):
                return
            self._wait_for_room(job, facts, priority, product)
        elif not quota_blocked:
            product, holder, resource = held_for[0]
            kept_for = held_quota_reason(job.gang, resource, holder)
            self.waiting.append((job, facts, WaitCause.NO_IDLE_QUOTA, kept_for, product))
        else:
            self._wait_for_quota(job, shape, priority, quota_blocked[0])
            return
        if self._changes == changes:
            # nothing this job did changes what the next one like it finds
            _, _, cause, reason, product = self.waiting[-1]
            shape.room_wait = (changes, priority, cause, reason, product)

    def _may_backfill(self, job: PendingJob, facts: GangFacts) -> bool:
        """Whether `job` might start in room held for a reservation: the one thing about
        a job beyond its team, gang and priority that a pass decides by."""
        runtime = job.estimated_runtime_s
        if runtime is None or self.now + runtime > self._latest_start:
            return False
        for product in facts.products:
            held = self.reservations.get(product)
            if (
                held is not None
                and (product, True) not in facts.no_room
                and held.ends_in_time(self.now + runtime)
            ):
                return True
        return False

    def _wait_for_quota(
        self,
        job: PendingJob,
        shape: TeamShape,
        priority: int,
        blocked: tuple[str | None, QuotaBlock],
    ) -> None:
        facts = shape.facts
        product, block = blocked
        # past its own ceiling, only the team's own lower-priority jobs can make room; not
        # if a teammate ahead of it waits at that ceiling too: it would take what the
        # victims give back in the next pass, and the victims would have stopped for nothing
        own_team_only = not block.no_idle_quota
        ceiling = (job.team, block.resource)
        if not (own_team_only and ceiling in self._at_ceiling) and self._make_room(
            job, facts, priority, product, own_team_only
        ):
            return
        if own_team_only:
            self._at_ceiling.add(ceiling)
        if block.no_idle_quota:
            self._hold_quota(job, block)
            self._hold_team_quota(job, priority, block)
        cause = WaitCause.NO_IDLE_QUOTA if block.no_idle_quota else WaitCause.TEAM_QUOTA
        reason = shape.reasons.get(id(block))
        if reason is None:
            reason = shape.reasons[id(block)] = quota_reason(job.gang, block)
        shape.quota_wait = (self._team_admissions.get(job.team, 0), cause, reason, product)
        self.waiting.append((job, facts, cause, reason, product))

    def _wait_for_room(
        self, job: PendingJob, facts: GangFacts, priority: int, product: str | None
    ) -> None:
        held = self.reservations.get(product)
        if held is None:
            held = reserve(
                job.id,
                priority,
                job.gang,
                product,
                self.free,
                self._releases(product, any_node=not job.gang.gpus),
                self.now,
            )
            self.reservations[product] = held
            self._changes += 1
            if held.start is not None:
                self._latest_start = max(self._latest_start, held.start)
            reason = holds_reservation_reason(job.gang, product, held.start)
            self.waiting.append((job, facts, WaitCause.CAPACITY, reason, product))
            return
        if held.behind_reason is None:
            held.behind_reason = behind_reservation_reason(held.job_id, held.priority, product)
        self.waiting.append((job, facts, WaitCause.RESERVATION, held.behind_reason, product))

    # -- quota and room --------------------------------------------------------------------

    def _count_admission(self, team: str) -> None:
        self._team_admissions[team] = self._team_admissions.get(team, 0) + 1
        self._all_admissions += 1
        self._changes += 1

    def _quota_block(
        self, team: str, shape: TeamShape, product: str | None, need: Need
    ) -> QuotaBlock | None:
        """The ledger's answer, kept: a block holds until the team admits (its usage
        only grows until then, and the teams' together too), a pass until anyone admits."""
        known = shape.blocks.get(product)
        if known is not None:
            stamp, block = known
            if stamp == (
                self._all_admissions if block is None else self._team_admissions.get(team, 0)
            ):
                return block
        block = self.ledger.block(team, need)
        stamp = self._all_admissions if block is None else self._team_admissions.get(team, 0)
        shape.blocks[product] = (stamp, block)
        return block

    def _hold_quota(self, job: PendingJob, block: QuotaBlock) -> None:
        """Keep the GPU quota that borrowers give back for `job`, the first in fair order
        to wait for idle quota: teams after it may not borrow that product until it
        starts, or idle quota would always go to the teams with the smallest jobs, however
        far beyond their share. Only if what borrowers hold beyond their nominal quota
        would cover it: otherwise the job can start only once its own team's jobs end,
        and holding quota for it would leave GPUs idle for nothing."""
        resource = block.resource
        if not resource.startswith("gpus:") or resource in self._quota_holds:
            return
        self._idle_quota_waiters.setdefault(resource, (job.team, block.need))
        if idle_quota_kept(self.ledger, job.team, resource, block.need):
            self._quota_holds[resource] = (job.id, job.team)
            self._changes += 1

    def _hold_team_quota(self, job: PendingJob, priority: int, block: QuotaBlock) -> None:
        """Keep a team's nominal quota for `job` when the team is below it, the job would
        fit in it alone, only the team's own running jobs stand in the way (others borrow
        the rest), and it has waited `TEAM_HOLD_AFTER_S`: the team's later jobs may then
        take only room they give back before the job could start, or a job as large as its
        team's quota would wait for as long as the team keeps starting small ones. Not at
        once: draining a team leaves its quota to borrowers, which costs more than it
        saves for a job that would start soon anyway (bench.sched_sim: mean completion
        time over five traces 11% lower with the hour, no better with no wait)."""
        account = self.ledger.accounts[job.team]
        resource = block.resource
        if (
            job.team in self._team_holds
            or self.now - job.submitted_at < TEAM_HOLD_AFTER_S
            or block.need > block.nominal
            or account.used.get(resource, 0) >= account.nominal_of(resource)
        ):
            return
        until = self._team_quota_frees_at(job.team, resource, block.need)
        self._team_holds[job.team] = (priority, team_hold_reason(job.id, block), until, resource)
        self._changes += 1

    def _team_quota_frees_at(self, team: str, resource: str, need: int) -> float:
        """When the team's jobs (running, and admitted by this pass) will have given back
        enough of `resource` for `need` within its nominal quota, by their estimated ends."""
        if self._running_of_team is None:
            self._running_of_team = {}
            for running in self.cluster.running:
                self._running_of_team.setdefault(running.team, []).append(running)
        holding = [
            (self._running_end(running), need_of(running.gang, running.gpu_product))
            for running in self._running_of_team.get(team, [])
        ]
        for admission, pending in self._admitted_of_team.get(team, ()):
            holding.append(
                (self._admitted_end(pending), need_of(pending.gang, admission.gpu_product))
            )
        account = self.ledger.accounts[team]
        used, nominal = account.used.get(resource, 0), account.nominal_of(resource)
        for end, held in sorted(holding):
            used -= dict(held).get(resource, 0)
            if used + need <= nominal:
                return end
        return math.inf

    def _held_for_teammate(self, job: PendingJob, facts: GangFacts, priority: int) -> bool:
        """Whether `job` waits for a teammate holding the team's quota (see
        _hold_team_quota): unless it needs none of that quota or ends before the teammate
        could start."""
        hold = self._team_holds.get(job.team)
        if hold is None:
            return False
        held_priority, reason, until, resource = hold
        if priority > held_priority:
            return False
        if resource not in facts.always_needs:
            return False  # it may run without the quota kept (on another GPU product)
        runtime = job.estimated_runtime_s
        if runtime is not None and not math.isinf(until) and self.now + runtime <= until:
            return False
        self.waiting.append((job, facts, WaitCause.TEAM_QUOTA, reason, facts.products[0]))
        return True

    def _held_from(self, team: str, need: Need) -> tuple[str, str] | None:
        """(the job the quota is kept for, the resource) if `need` would borrow quota
        kept for another team's job."""
        account = self.ledger.accounts[team]
        for key, amount in need:
            hold = self._quota_holds.get(key)
            if (
                hold is not None
                and hold[1] != team
                and account.used.get(key, 0) + amount > account.nominal_of(key)
            ):
                return hold[0], key
        return None

    def _place(
        self, job: PendingJob, facts: GangFacts, product: str | None
    ) -> tuple[Placement | None, bool]:
        """A placement in free room, or in held room for a job that ends in time; and
        whether it went ahead of a reservation."""
        held = self.reservations.get(product)
        if (product, False) not in facts.no_room:
            placement = self.free.place(job.gang, product)
            if placement is not None:
                return placement, held is not None
            facts.no_room.add((product, False))
        runtime = job.estimated_runtime_s
        if held is None or runtime is None or not held.ends_in_time(self.now + runtime):
            return None, False
        if (product, True) in facts.no_room:
            return None, False
        placement = held.place_short(self.free, job.gang, product)
        if placement is None:
            facts.no_room.add((product, True))
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
        if self._planned is not None:
            self._planned.add(job.team, need)
        self._count_admission(job.team)
        admission = Admission(
            job.id, job.team, placement.nodes, placement.gpu_product, borrowed, backfilled
        )
        self.admitted.append((admission, job))
        self._admitted_of_team.setdefault(job.team, []).append((admission, job))

    def _make_room(
        self,
        job: PendingJob,
        facts: GangFacts,
        priority: int,
        product: str | None,
        own_team_only: bool,
    ) -> bool:
        """Preempt for the job, or claim jobs already stopping. Only jobs that could take
        anyone's room try, at most `ROOM_TRIES` of a team per product and `PASS_ROOM_TRIES`
        in all in a pass, and none at least as large as one of its team's gangs that
        already failed: that bounds the work of a pass and the churn of preemption alike
        (the next pass goes on where this one stopped)."""
        if self._room_tries >= PASS_ROOM_TRIES:
            return False
        tried = self._room_tried.setdefault((job.team, product), [])
        if len(tried) >= ROOM_TRIES or any(_covers(job.gang, failed) for failed in tried):
            return False
        if self._index is None:
            self._index = RunningIndex(self.cluster.running, self.now)
            self._planned = self.ledger.copy()
        assert self._planned is not None
        if not self._index.may_help(job, priority, product, self._planned):
            return False
        tried.append(job.gang)
        self._room_tries += 1
        self._changes += 1
        held = self.reservations.get(product)
        plan = plan_room(
            job,
            priority,
            product,
            self.free,
            self._planned,
            self._index,
            self.shares,
            own_team_only,
            held,
            self._idle_quota_waiters,
        )
        if plan is None:
            return False
        tried.remove(job.gang)  # only failures rule out larger gangs
        tried.append(_SUCCEEDED)
        # the job's quota is spoken for from now on, in what runs and in what is planned
        need = need_of(job.gang, product)
        self.ledger.add(job.team, need)
        self._planned.add(job.team, need)
        self._count_admission(job.team)
        for victim in plan.victims:
            self.preemptions.append(
                Preemption(victim.job.id, victim.job.team, job.id, victim.reason)
            )
        reason = preempting_reason([v.job for v in plan.victims], list(plan.claimed))
        self.waiting.append((job, facts, WaitCause.PREEMPTING, reason, product))
        return True

    # -- what running jobs will free -------------------------------------------------------

    def _pool_releases(self) -> list[tuple[str, float, int]]:
        """(pool, estimated end, amount) of each job holding room after this pass: the
        running jobs not chosen as victims (a stopping one ends now) and the admitted."""
        taken = self._index.taken if self._index is not None else set()
        releases = [
            (_pool(job.gang, job.gpu_product), self._running_end(job), _pool_amount(job.gang))
            for job in self.cluster.running
            if job.id not in taken
        ]
        for admission, pending in self.admitted:
            end = self._admitted_end(pending)
            releases.append(
                (_pool(pending.gang, admission.gpu_product), end, _pool_amount(pending.gang))
            )
        return releases

    def _releases(self, product: str | None, any_node: bool) -> list[Release]:
        """What each job holding room on the nodes of `product` (or, for a gang without
        GPUs, on any node) gives back, and when; the running jobs' worked out once."""
        index, products = self.free.index, self.free.product
        if self._running_releases is None:
            self._running_releases = []
            for job in self.cluster.running:
                end = self._running_end(job)
                entry = (job.id, _release_of(job.gang, job.nodes, end, index))
                self._running_releases.append(entry)
                for on in {products[i] for i in entry[1].nodes}:
                    self._running_releases_on.setdefault(on, []).append(entry)
        taken = self._index.taken if self._index is not None else set()
        running = self._running_releases if any_node else self._running_releases_on.get(product, [])
        releases = [release for job_id, release in running if job_id not in taken]
        for admission, pending in self.admitted:
            end = self._admitted_end(pending)
            release = _release_of(pending.gang, admission.nodes, end, index)
            if any_node or any(products[i] == product for i in release.nodes):
                releases.append(release)
        return releases

    def _known_start(
        self, job: PendingJob, cause: WaitCause, heads: dict[str, float | None]
    ) -> float | None:
        """The earliest a waiting job can start whatever room is free: a job held back by
        quota waits for a running job of its team (or, with no idle quota to borrow, any
        running job) to end; math.inf when none has an estimated end."""
        if cause not in (WaitCause.TEAM_QUOTA, WaitCause.NO_IDLE_QUOTA):
            return heads.get(job.id)
        if self._first_ends is None:
            # once per pass: over every waiting job, the scan was most of a 10k-job pass
            self._first_ends = {}
            first = math.inf
            for running in self.cluster.running:
                end = self._running_end(running)
                first = min(first, end)
                if end < self._first_ends.get(running.team, math.inf):
                    self._first_ends[running.team] = end
            self._first_end = first
        if cause is WaitCause.TEAM_QUOTA:
            return self._first_ends.get(job.team, math.inf)
        return self._first_end

    def _running_end(self, job: RunningJob) -> float:
        """When a running job's room is free, for planning: now for one already stopping."""
        return _end_after(self.now if job.stopping else job.estimated_end(), self.now)

    def _admitted_end(self, job: PendingJob) -> float:
        """When a job this pass admits is estimated to give its room back."""
        runtime = job.estimated_runtime_s
        return _end_after(None if runtime is None else self.now + runtime, self.now)

    # -- estimates -------------------------------------------------------------------------

    def _in_start_order(self) -> None:
        """Waiting jobs in the order they are expected to start: fair order with each job
        charged to its team as if it had started, so that teams take turns down the queue
        (the pass itself charges only what it admits). Past `EXACT_POSITIONS` waiting jobs
        they stay in the order the pass weighed them (the current fair order, each team's
        jobs together): ordering them all would cost a good part of a pass."""
        if len(self.waiting) > EXACT_POSITIONS:
            return
        jobs = [entry[0] for entry in self.waiting]
        order = fair_order(
            jobs, self.ledger.copy(), self.totals, list(self.gpu_products), charge_each=True
        )
        rank = {job.id: i for i, job in enumerate(order)}
        self.waiting.sort(key=lambda entry: rank[entry[0].id])

    def _waiting_with_estimates(self) -> tuple[Waiting, ...]:
        self._in_start_order()
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
        releases = self._pool_releases()
        heads = {held.job_id: held.start for held in self.reservations.values()}
        now = self.now
        preempting = WaitCause.PREEMPTING
        waiting = self.waiting
        starts = estimated_starts(
            free_by_pool,
            releases,
            now,
            [
                (
                    facts.pools[product],
                    facts.amount,
                    job.estimated_runtime_s,
                    now if cause is preempting else self._known_start(job, cause, heads),
                )
                for job, facts, cause, _, product in waiting
            ],
        )
        return tuple(
            [
                Waiting(job.id, position, cause, reason, start)
                for position, ((job, _, cause, reason, _), start) in enumerate(
                    zip(waiting, starts, strict=True), start=1
                )
            ]
        )


ROOM_TRIES = 2
# a team's job waits this long for its team's quota before the team's later jobs wait for it
TEAM_HOLD_AFTER_S = 3600.0
EXACT_POSITIONS = 2000
PASS_ROOM_TRIES = 32


def _guaranteed(block: QuotaBlock) -> bool:
    """Blocked only because other teams borrow what the team's nominal quota covers."""
    return block.no_idle_quota and block.used + block.need <= block.nominal


_SUCCEEDED = Gang(1 << 30, 1 << 30, None, 1 << 62, 1 << 62)  # covers no gang


def _covers(gang: Gang, failed: Gang) -> bool:
    """Whether `gang` asks at least what `failed` asked, learner and gang alike."""
    return (
        gang.learners >= failed.learners
        and gang.gpus >= failed.gpus
        and gang.millicpus >= failed.millicpus
        and gang.memory >= failed.memory
    )


def _release_of(gang: Gang, nodes: tuple[str, ...], end: float, index: dict[str, int]) -> Release:
    room = (gang.gpus, gang.millicpus, gang.memory)
    return Release(end, tuple([index[name] for name in nodes if name in index]), room)


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
    with _collector_paused():
        return _Pass(cluster, now).run()


@contextlib.contextmanager
def _collector_paused() -> Iterator[None]:
    """A pass makes hundreds of thousands of short-lived tuples and no reference cycles;
    the cycle collector, woken by the allocations, would walk every live object (the
    snapshot included) again and again: a sixth of a pass over 10,000 jobs. Reference
    counting frees the pass's garbage all the same."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
