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

import heapq
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from lifecycle_manager.scheduler.model import PendingJob, RunningJob
from lifecycle_manager.scheduler.placement import FreeCapacity
from lifecycle_manager.scheduler.quota import CPUS, Need, QuotaLedger, gpu_key, need_of


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
        by_key: dict[tuple[str, str], list[tuple[int, float, float, str, RunningJob]]] = {}
        for job in running:
            if job.stopping:
                continue
            lost = now - (job.last_checkpoint_at or job.started_at)
            key = (_resource(job.gang.gpus, job.gpu_product), job.team)
            by_key.setdefault(key, []).append((job.priority, lost, -job.started_at, job.id, job))
        for entries in by_key.values():
            entries.sort(key=lambda e: e[:4])
        self._by_key = by_key

    def of(self, resource: str, team: str) -> list[tuple[int, float, float, str, RunningJob]]:
        return self._by_key.get((resource, team), [])


def _resource(gpus: int, product: str | None) -> str:
    """The resource a job is taken from: its GPU product, or CPUs for a CPU-only job."""
    return gpu_key(product) if gpus else CPUS


def plan_room(
    job: PendingJob,
    priority: int,
    product: str | None,
    free: FreeCapacity,
    ledger: QuotaLedger,
    index: RunningIndex,
    shares: Mapping[str, float],
) -> Plan | None:
    """The fewest, most preferred jobs whose room lets `job` start, or None."""
    need = need_of(job.gang, product)
    resource = _resource(job.gang.gpus, product)
    account = ledger.accounts[job.team]
    reclaims = account.within_nominal(need)
    candidates = _candidates(job, priority, resource, reclaims, ledger, index, shares)
    chosen: list[tuple[RunningJob, str]] = []
    released: list[RunningJob] = []
    try:
        for victim, reason in candidates:
            if not _still_borrowing(victim, job, resource, ledger):
                continue
            chosen.append((victim, reason))
            _release(victim, free, ledger)
            released.append(victim)
            if _fits(job, product, need, free, ledger):
                break
        else:
            return None
        for victim, reason in reversed(chosen[:-1]):
            _restore(victim, free, ledger)
            released.remove(victim)
            if _fits(job, product, need, free, ledger):
                chosen.remove((victim, reason))
            else:
                _release(victim, free, ledger)
                released.append(victim)
    finally:
        for victim in released:
            _restore(victim, free, ledger)
    _hold_free_part(job, product, chosen, free)
    for victim, _ in chosen:
        index.taken.add(victim.id)
    return Plan(
        tuple(Victim(v, reason) for v, reason in chosen if not v.stopping),
        tuple(v for v, _ in chosen if v.stopping),
    )


def _candidates(
    job: PendingJob,
    priority: int,
    resource: str,
    reclaims: bool,
    ledger: QuotaLedger,
    index: RunningIndex,
    shares: Mapping[str, float],
) -> Iterator[tuple[RunningJob, str]]:
    taken = index.taken
    for stopping in index.stopping:
        if stopping.id not in taken:
            yield stopping, "already stopping"
    borrowing_teams = [
        team
        for team, account in ledger.accounts.items()
        if team != job.team and account.borrowing(resource)
    ]

    def lendable(team: str) -> Iterator[tuple[int, float, float, float, str, RunningJob]]:
        share = -shares.get(team, 0.0)
        for prio, lost, newest, job_id, victim in index.of(resource, team):
            if job_id not in taken and (reclaims or prio < priority):
                yield prio, lost, share, newest, job_id, victim

    for entry in heapq.merge(*(lendable(t) for t in borrowing_teams), key=lambda e: e[:5]):
        victim = entry[5]
        yield victim, _borrowed_reason(victim, job, priority, resource, reclaims)
    for prio, _, _, job_id, victim in index.of(resource, job.team):
        if prio >= priority:
            break
        if job_id not in taken:
            yield (
                victim,
                (f"job {job.id} of the same team has priority {priority}, above this job's {prio}"),
            )


def _borrowed_reason(
    victim: RunningJob, job: PendingJob, priority: int, resource: str, reclaims: bool
) -> str:
    what = f"{resource.removeprefix('gpus:')} GPUs" if resource.startswith("gpus:") else "CPUs"
    over = f"team {victim.team} is borrowing {what} beyond its nominal quota"
    if reclaims:
        return f"{over}; team {job.team} reclaims its own quota for job {job.id}"
    return (
        f"{over}; job {job.id} of team {job.team} has priority {priority}, "
        f"above this job's {victim.priority}"
    )


def _still_borrowing(
    victim: RunningJob, job: PendingJob, resource: str, ledger: QuotaLedger
) -> bool:
    """A borrowing team loses jobs only down to its nominal quota, never below it."""
    if victim.stopping or victim.team == job.team:
        return True
    return ledger.accounts[victim.team].borrowing(resource)


def _give_room(job: RunningJob, free: FreeCapacity, sign: int) -> None:
    g, c, m = job.gang.gpus, job.gang.millicpus, job.gang.memory
    for name in job.nodes:
        free.give(free.index[name], sign * g, sign * c, sign * m)


def _release(job: RunningJob, free: FreeCapacity, ledger: QuotaLedger) -> None:
    _give_room(job, free, 1)
    ledger.remove(job.team, need_of(job.gang, job.gpu_product))


def _restore(job: RunningJob, free: FreeCapacity, ledger: QuotaLedger) -> None:
    _give_room(job, free, -1)
    ledger.add(job.team, need_of(job.gang, job.gpu_product))


def _fits(
    job: PendingJob, product: str | None, need: Need, free: FreeCapacity, ledger: QuotaLedger
) -> bool:
    if ledger.block(job.team, need) is not None:
        return False
    placement = free.place(job.gang, product)
    if placement is None:
        return False
    g, c, m = job.gang.gpus, job.gang.millicpus, job.gang.memory
    for name in placement.nodes:
        free.give(free.index[name], g, c, m)
    return True


def _hold_free_part(
    job: PendingJob, product: str | None, chosen: list[tuple[RunningJob, str]], free: FreeCapacity
) -> None:
    """Keep the room free now that the job's planned placement needs, so that nobody else
    takes it while the victims stop."""
    for victim, _ in chosen:
        _give_room(victim, free, 1)
    placement = free.place(job.gang, product)
    if placement is not None:
        for name in placement.nodes:
            free.give(free.index[name], job.gang.gpus, job.gang.millicpus, job.gang.memory)
    for victim, _ in chosen:
        _give_room(victim, free, -1)
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
