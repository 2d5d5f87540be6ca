"""Which running jobs to stop so that a waiting job can start, and why.

A waiting job may take room from:
- jobs already asked to stop (they are leaving anyway; claiming them costs nothing);
- jobs of teams borrowing beyond their nominal quota, if the waiting job's team stays
  within its own nominal quota with it (reclaim), or if the waiting job has the higher
  priority (the borrowed room was never guaranteed);
- lower-priority jobs of its own team.
Victims are preferred in that order: borrowed quota of other teams first, then the lowest
priority, then the least work lost (time since the newest checkpoint), then the team
furthest over its fair share. They are added until the job fits (quota and a real
placement), then any victim the job can do without is dropped again, most preferred
kept, so the set is minimal.
"""

from __future__ import annotations

import itertools
from collections import Counter, defaultdict
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from lifecycle_manager.scheduler.backfill import Reservation, Room
from lifecycle_manager.scheduler.model import PendingJob, RunningJob
from lifecycle_manager.scheduler.placement import FreeCapacity
from lifecycle_manager.scheduler.quota import (
    Need,
    QuotaLedger,
    idle_quota_kept,
    need_of,
    taken_from,
)


@dataclass(frozen=True, slots=True)
class Victim:
    job: RunningJob
    reason: str


@dataclass(frozen=True, slots=True)
class Plan:
    """`victims` to ask to stop (none when the job only waits for jobs already stopping)
    and `claimed`: jobs already stopping whose room goes to this job."""

    victims: tuple[Victim, ...]
    claimed: tuple[RunningJob, ...]


class RunningIndex:
    """Running jobs by GPU product and team, each list in victim preference order."""

    def __init__(self, running: tuple[RunningJob, ...], now: float) -> None:
        self.stopping = [job for job in running if job.stopping]
        self.taken: set[str] = set()
        # quota spoken for by the pass's earlier plans, per team and resource: a team is
        # borrowing for what runs, not for what it is about to start
        self.promised: dict[str, Counter[str]] = defaultdict(Counter)
        by_key: dict[tuple[str, str], list[tuple[int, float, float, str, RunningJob]]] = {}
        for job in running:
            if job.stopping:
                continue
            lost = now - (job.last_checkpoint_at or job.started_at)
            key = (taken_from(job.gang.gpus, job.gpu_product), job.team)
            by_key.setdefault(key, []).append((job.priority, lost, -job.started_at, job.id, job))
        self._lowest: dict[str, int] = {}
        for (resource, _), entries in by_key.items():
            entries.sort(key=lambda e: e[:4])
            self._lowest[resource] = min(entries[0][0], self._lowest.get(resource, entries[0][0]))
        self._by_key = by_key
        self._by_preference: dict[str, list[tuple[int, float, float, float, str, RunningJob]]] = {}

    def of(self, resource: str, team: str) -> list[tuple[int, float, float, str, RunningJob]]:
        return self._by_key.get((resource, team), [])

    def by_preference(
        self, resource: str, shares: Mapping[str, float]
    ) -> list[tuple[int, float, float, float, str, RunningJob]]:
        """Every team's jobs on `resource` in victim preference: lowest priority, least
        work lost, team furthest over its fair share, newest; sorted once (`shares` do not
        change while a pass runs). Job ids are unique, so entries never compare jobs."""
        ordered = self._by_preference.get(resource)
        if ordered is None:
            ordered = sorted(
                (prio, lost, -shares.get(team, 0.0), newest, job_id, victim)
                for (of_resource, team), entries in self._by_key.items()
                if of_resource == resource
                for prio, lost, newest, job_id, victim in entries
            )
            self._by_preference[resource] = ordered
        return ordered

    def may_help(
        self, job: PendingJob, priority: int, product: str | None, planned: QuotaLedger
    ) -> bool:
        """Whether any job could be taken for `job` at all: one already stopping, a
        borrower's if the job's team is within its nominal quota with it, or one of lower
        priority. Cheap, so that jobs that could never preempt do not count as tries."""
        if any(job.id not in self.taken for job in self.stopping):
            return True
        resource = taken_from(job.gang.gpus, product)
        lowest = self._lowest.get(resource)
        if lowest is None:
            return False
        return priority > lowest or planned.accounts[job.team].within_nominal(
            need_of(job.gang, product)
        )


def plan_room(
    job: PendingJob,
    priority: int,
    product: str | None,
    free: FreeCapacity,
    planned: QuotaLedger,
    index: RunningIndex,
    shares: Mapping[str, float],
    own_team_only: bool = False,
    ahead: Reservation | None = None,
    waiting_for_idle_quota: Mapping[str, tuple[str, int]] | None = None,
) -> Plan | None:
    """The fewest, most preferred jobs whose room lets `job` start, or None.

    `planned` is the teams' usage once earlier plans of the pass have played out (their
    victims gone); a plan found here is played out in it too: its victims leave it.
    `ahead` is the reservation of a job ahead of this one in the queue: in the next pass
    that job goes first, so the victims' room is the job's only where the reservation's
    head neither starts in it nor counts on it. Planned without it, a job behind the
    reservation preempted, found the freed room held for the head in the next pass, and
    its victim started again in the room left: preempted again for the same job, pass
    after pass. `waiting_for_idle_quota` gives, per GPU resource, (team, need) of the
    first job ahead to wait for its idle quota: where the victims' going would keep that
    quota for it, the job may not borrow it.
    """
    ahead_of_job = _Ahead(ahead, waiting_for_idle_quota or {})
    need = need_of(job.gang, product)
    resource = taken_from(job.gang.gpus, product)
    reclaims = planned.accounts[job.team].within_nominal(need)
    chosen: list[Victim] = []
    candidates = _candidates(job, priority, resource, reclaims, planned, index, shares)
    if own_team_only:
        candidates = _own_team(job, priority, resource, index)
    if job.gang.learners > 1 or job.gang.gpus >= WHOLE_NODE_GPUS:
        candidates = _by_node(job, candidates, free)
    for candidate, why in candidates:
        if not _still_borrowing(candidate, job, resource, planned, index):
            continue
        chosen.append(Victim(candidate, _reason(why, candidate, job, priority)))
        _release(candidate, free, planned, ahead_of_job)
        if ahead_of_job.fits(job, product, need, free, planned):
            break
    else:
        for victim in chosen:
            _restore(victim.job, free, planned, ahead_of_job)
        return None
    # drop the victims the job can do without, the least preferred first
    needed = [chosen[-1]]
    for victim in reversed(chosen[:-1]):
        _restore(victim.job, free, planned, ahead_of_job)
        if not ahead_of_job.fits(job, product, need, free, planned):
            _release(victim.job, free, planned, ahead_of_job)
            needed.append(victim)
    needed.reverse()
    if not _only_borrowed(needed, job, resource, planned, index):
        for victim in needed:
            _restore(victim.job, free, planned, ahead_of_job)
        return None
    for victim in needed:
        ahead_of_job.forgive(victim.job, free)  # _hold_free_part counts the victims' whole room
    _hold_free_part(job, product, [v.job for v in needed], free)
    index.taken.update(v.job.id for v in needed)
    index.promised[job.team].update(dict(need))
    return Plan(
        tuple(v for v in needed if not v.job.stopping),
        tuple(v.job for v in needed if v.job.stopping),
    )


_STOPPING, _RECLAIM, _OUTRANKED_BORROWER, _OUTRANKED_TEAMMATE = range(4)

# A gang of learners this large needs nodes cleared whole, not the most preferred victims
# wherever they run: those would be spread over many nodes and clear none.
WHOLE_NODE_GPUS = 4
NODE_CANDIDATES = 256  # enough to clear the nodes of a 64-learner gang of 8-GPU learners


def _by_node(
    job: PendingJob, candidates: Iterator[tuple[RunningJob, int]], free: FreeCapacity
) -> Iterator[tuple[RunningJob, int]]:
    """The most preferred candidates regrouped node by node: first the nodes that take the
    fewest and most preferred victims to hold a learner, each with those victims; then the
    rest in order."""
    ordered = list(itertools.islice(candidates, NODE_CANDIDATES))
    on_node: dict[int, list[int]] = {}
    for rank, (victim, _) in enumerate(ordered):
        for name in set(victim.nodes):
            on_node.setdefault(free.index[name], []).append(rank)
    gang = job.gang
    costs = []
    for node, ranks in on_node.items():
        room = [free.gpus[node], free.millicpus[node], free.memory[node]]
        for taken, rank in enumerate(ranks, start=1):
            victim = ordered[rank][0]
            learners_here = victim.nodes.count(free.names[node])
            room[0] += learners_here * victim.gang.gpus
            room[1] += learners_here * victim.gang.millicpus
            room[2] += learners_here * victim.gang.memory
            if room[0] >= gang.gpus and room[1] >= gang.millicpus and room[2] >= gang.memory:
                costs.append((taken, rank, node))
                break
    given: set[int] = set()
    for _, _, node in sorted(costs):
        for rank in on_node[node]:
            if rank not in given:
                given.add(rank)
                yield ordered[rank]
    for rank, entry in enumerate(ordered):
        if rank not in given:
            yield entry
    yield from candidates


def _candidates(
    job: PendingJob,
    priority: int,
    resource: str,
    reclaims: bool,
    ledger: QuotaLedger,
    index: RunningIndex,
    shares: Mapping[str, float],
) -> Iterator[tuple[RunningJob, int]]:
    """Possible victims in order of preference, each with why it may be taken."""
    taken = index.taken
    for stopping in index.stopping:
        if stopping.id not in taken:
            yield stopping, _STOPPING
    borrowing = {
        team
        for team in ledger.accounts
        if team != job.team and _borrows(team, resource, ledger, index)
    }
    why = _RECLAIM if reclaims else _OUTRANKED_BORROWER
    for prio, _, _, _, job_id, victim in index.by_preference(resource, shares):
        if not reclaims and prio >= priority:
            break  # sorted by priority: no lower one follows
        if victim.team in borrowing and job_id not in taken:
            yield victim, why
    yield from _own_team(job, priority, resource, index)


def _own_team(
    job: PendingJob, priority: int, resource: str, index: RunningIndex
) -> Iterator[tuple[RunningJob, int]]:
    for prio, _, _, job_id, victim in index.of(resource, job.team):
        if prio >= priority:
            return
        if job_id not in index.taken:
            yield victim, _OUTRANKED_TEAMMATE


def _reason(why: int, victim: RunningJob, job: PendingJob, priority: int) -> str:
    if why == _STOPPING:
        return "already stopping"
    if why == _OUTRANKED_TEAMMATE:
        return (
            f"job {job.id} of the same team has priority {priority}, "
            f"above this job's {victim.priority}"
        )
    resource = taken_from(victim.gang.gpus, victim.gpu_product)
    what = f"{resource.removeprefix('gpus:')} GPUs" if resource.startswith("gpus:") else "CPUs"
    over = f"team {victim.team} is borrowing {what} beyond its nominal quota"
    if why == _RECLAIM:
        return f"{over}; team {job.team} reclaims its own quota for job {job.id}"
    return (
        f"{over}; job {job.id} of team {job.team} has priority {priority}, "
        f"above this job's {victim.priority}"
    )


def _used(team: str, resource: str, ledger: QuotaLedger, index: RunningIndex) -> float:
    """What `team` uses of `resource`, not counting what earlier plans promised it."""
    return ledger.accounts[team].used.get(resource, 0) - index.promised[team][resource]


def _borrows(team: str, resource: str, ledger: QuotaLedger, index: RunningIndex) -> bool:
    return _used(team, resource, ledger, index) > ledger.accounts[team].nominal_of(resource)


def _still_borrowing(
    victim: RunningJob, job: PendingJob, resource: str, ledger: QuotaLedger, index: RunningIndex
) -> bool:
    """A borrowing team loses jobs only down to its nominal quota, never below it."""
    if victim.stopping or victim.team == job.team:
        return True
    return _borrows(victim.team, resource, ledger, index)


def _only_borrowed(
    victims: list[Victim], job: PendingJob, resource: str, ledger: QuotaLedger, index: RunningIndex
) -> bool:
    """Whether the victims of other teams take back no more than those teams borrow: each
    is needed to bring its team down to its nominal quota (`ledger` without the victims).
    Taken one by one while their team still borrowed, two victims could together leave it
    below its quota, and its next job within that quota reclaimed it in the next pass
    from the job they were stopped for."""
    for victim in victims:
        running = victim.job
        if running.stopping or running.team == job.team:
            continue
        used = _used(running.team, resource, ledger, index)
        amount = dict(need_of(running.gang, running.gpu_product)).get(resource, 0)
        if used + amount <= ledger.accounts[running.team].nominal_of(resource):
            return False
    return True


def _give_room(job: RunningJob, free: FreeCapacity, sign: int) -> None:
    g, c, m = job.gang.gpus, job.gang.millicpus, job.gang.memory
    for name in job.nodes:
        free.give(free.index[name], sign * g, sign * c, sign * m)


class _Ahead:
    """What the jobs ahead of the waiting job take of its victims' room and quota in the
    next pass. The reservation's head: all it needs where it would start in that room,
    else what it expects running jobs to give back, per node (a victim's room there pays
    that first; only the rest is the waiting job's). The first job waiting for idle quota
    of a GPU product: that quota, where the victims' going would keep it for it."""

    def __init__(
        self, ahead: Reservation | None, waiting_for_idle_quota: Mapping[str, tuple[str, int]]
    ) -> None:
        self._ahead = ahead
        self._waiters = waiting_for_idle_quota
        expected = ahead.expects if ahead is not None else {}
        self._owed = {node: list(room) for node, room in expected.items()}
        self._paid: dict[str, list[tuple[int, Room]]] = {}

    def fits(
        self,
        job: PendingJob,
        product: str | None,
        need: Need,
        free: FreeCapacity,
        ledger: QuotaLedger,
    ) -> bool:
        if self._waiters and _borrows_kept(job.team, need, ledger, self._waiters):
            return False
        ahead = self._ahead
        if ahead is None or ahead.gang is None or not self._paid:
            return _fits(job, product, need, free, ledger)
        # the room as the next pass finds it: the victims' all free, the holds given back
        back = [(node, room) for paid in self._paid.values() for node, room in paid]
        back += list(ahead.holds.items())
        for node, room in back:
            free.give(node, *room)
        gang = ahead.gang
        head = free.place(gang, ahead.product)
        fits_beside_head = head is not None and _fits(job, product, need, free, ledger)
        for name in head.nodes if head is not None else ():
            free.give(free.index[name], gang.gpus, gang.millicpus, gang.memory)
        for node, room in back:
            free.take(node, *room)
        if head is not None:
            return fits_beside_head
        return _fits(job, product, need, free, ledger)

    def pay(self, job: RunningJob, free: FreeCapacity) -> None:
        paid = self._paid.setdefault(job.id, [])
        for node, room in self._owed.items():
            learners = job.nodes.count(free.names[node])
            if not learners:
                continue
            given = (
                min(learners * job.gang.gpus, room[0]),
                min(learners * job.gang.millicpus, room[1]),
                min(learners * job.gang.memory, room[2]),
            )
            for d in range(3):
                room[d] -= given[d]
            free.take(node, *given)
            paid.append((node, given))

    def forgive(self, job: RunningJob, free: FreeCapacity) -> None:
        """Give back to the nodes, and owe again, what `job` paid."""
        for node, given in self._paid.pop(job.id, []):
            room = self._owed[node]
            for d in range(3):
                room[d] += given[d]
            free.give(node, *given)


def _borrows_kept(
    team: str, need: Need, ledger: QuotaLedger, waiters: Mapping[str, tuple[str, int]]
) -> bool:
    """Whether `need` borrows quota that would be kept for another team's waiting job."""
    account = ledger.accounts[team]
    for key, amount in need:
        waiter = waiters.get(key)
        if (
            waiter is not None
            and waiter[0] != team
            and account.used.get(key, 0) + amount > account.nominal_of(key)
            and idle_quota_kept(ledger, waiter[0], key, waiter[1])
        ):
            return True
    return False


def _release(job: RunningJob, free: FreeCapacity, ledger: QuotaLedger, ahead: _Ahead) -> None:
    _give_room(job, free, 1)
    ahead.pay(job, free)
    ledger.remove(job.team, need_of(job.gang, job.gpu_product))


def _restore(job: RunningJob, free: FreeCapacity, ledger: QuotaLedger, ahead: _Ahead) -> None:
    ahead.forgive(job, free)
    _give_room(job, free, -1)
    ledger.add(job.team, need_of(job.gang, job.gpu_product))


def _fits(
    job: PendingJob, product: str | None, need: Need, free: FreeCapacity, ledger: QuotaLedger
) -> bool:
    gang = job.gang
    if free.room_for(product, gang.gpus) < gang.learners or ledger.block(job.team, need):
        return False
    placement = free.place(gang, product)
    if placement is None:
        return False
    for name in placement.nodes:
        free.give(free.index[name], gang.gpus, gang.millicpus, gang.memory)
    return True


def _hold_free_part(
    job: PendingJob, product: str | None, victims: list[RunningJob], free: FreeCapacity
) -> None:
    """Keep the room free now that the job's planned placement needs, so that nobody else
    takes it while the victims stop. On entry `free` counts the victims' room as free; on
    return it no longer does."""
    placement = free.place(job.gang, product)
    if placement is not None:
        for name in placement.nodes:
            free.give(free.index[name], job.gang.gpus, job.gang.millicpus, job.gang.memory)
    for victim in victims:
        _give_room(victim, free, -1)  # their room stays taken until they stop
    if placement is None:
        return
    need: dict[int, list[int]] = {}
    for name in placement.nodes:
        room = need.setdefault(free.index[name], [0, 0, 0])
        room[0] += job.gang.gpus
        room[1] += job.gang.millicpus
        room[2] += job.gang.memory
    for i, (g, c, m) in need.items():
        free.take(i, min(g, free.gpus[i]), min(c, free.millicpus[i]), min(m, free.memory[i]))
