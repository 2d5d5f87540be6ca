"""After a scheduling pass: which running elastic jobs grow or shrink, and where.

The scheduler (`schedule`) admits whole gangs at the size their manifests ask for; this
step then sizes the elastic jobs among what is left (`autoscale`, the dynamic programme of
`elastic_optimizer`):

- room is counted in each job's unit: GPUs for a job with GPUs, whole CPUs for one
  without; jobs of each kind are sized together over the free room of that kind plus
  what they hold;
- while a job waits for room (`WaitCause.CAPACITY` or `RESERVATION`), elastic jobs do not
  grow, and they shrink, down to their smallest size, when that frees enough for the first
  such job to start;
- while a job waits for its own team's quota (`TEAM_QUOTA`), its team's elastic jobs do
  not grow, and they shrink, a learner at a time off the job that loses least by it, when
  that brings the team's quota down far enough for the job to start;
- a job started or resized less than the autoscaler's interval ago keeps its size (a
  resize costs a checkpoint and a restart, and its throughput is still being measured);
- a growth stays within the team's quota and what it may borrow, as an admission does,
  and is placed like one (best fit over the free room and the job's own); one that does
  not fit is dropped. A shrink keeps the first learners where they are.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from lifecycle_manager.scheduler.autoscale import Sizing, autoscale, shrink_reason
from lifecycle_manager.scheduler.decisions import SchedulePass, WaitCause
from lifecycle_manager.scheduler.elastic_optimizer import Choice, ElasticJob
from lifecycle_manager.scheduler.model import ClusterSnapshot, Gang, PendingJob, RunningJob
from lifecycle_manager.scheduler.placement import FreeCapacity, candidate_products
from lifecycle_manager.scheduler.quota import JOBS, Need, QuotaLedger, need_of

_ROOM_CAUSES = (WaitCause.CAPACITY, WaitCause.RESERVATION)


@dataclass(frozen=True, slots=True)
class ElasticRunning:
    """A running elastic job as the autoscaler sizes it: its choices (one per learner
    count), the one it runs with, the samples it has left (inf: unknown), and whether it
    may be resized now."""

    id: str
    choices: tuple[Choice, ...]
    current: Choice
    samples_left: float
    movable: bool = True


@dataclass(frozen=True, slots=True)
class Resize:
    """Run `job_id` with `new` instead of `old`: learner i on `nodes[i - 1]`."""

    job_id: str
    old: Choice
    new: Choice
    nodes: tuple[str, ...]
    gpu_product: str | None
    reason: str


def _unit(gang: Gang) -> int:
    return gang.gpus if gang.gpus else max(math.ceil(gang.millicpus / 1000), 1)


def _free_capacity(snapshot: ClusterSnapshot, decided: SchedulePass) -> FreeCapacity:
    free = FreeCapacity(snapshot.nodes)
    for job in snapshot.running:
        for node in job.nodes:
            if node in free.index:
                free.take(free.index[node], job.gang.gpus, job.gang.millicpus, job.gang.memory)
    pending = {job.id: job.gang for job in snapshot.pending}
    for admission in decided.admissions:
        gang = pending.get(admission.job_id)
        if gang is None:
            continue
        for node in admission.nodes:
            if node in free.index:
                free.take(free.index[node], gang.gpus, gang.millicpus, gang.memory)
    return free


def _free_units(free: FreeCapacity, gpus: bool) -> int:
    if gpus:
        return sum(max(g, 0) for g in free.gpus)
    return sum(max(m, 0) for m in free.millicpus) // 1000


def _first_waiting_need(
    snapshot: ClusterSnapshot, decided: SchedulePass, gpus: bool
) -> tuple[int, str | None]:
    """The units the first job waiting for room of this kind needs, and its id (0 and
    None: none waits)."""
    pending = {job.id: job.gang for job in snapshot.pending}
    for waiting in decided.waiting:
        gang = pending.get(waiting.job_id)
        if waiting.cause in _ROOM_CAUSES and gang is not None and bool(gang.gpus) == gpus:
            return gang.learners * _unit(gang), waiting.job_id
    return 0, None


def _quota_need(gang: Gang, product: str | None) -> Need:
    """What more learners count against the team's quota (not another job)."""
    return tuple((key, amount) for key, amount in need_of(gang, product) if key != JOBS)


def _within_quota(
    job: ElasticRunning, holding: RunningJob, ledger: QuotaLedger
) -> tuple[Choice, ...]:
    """The job's choices its team's quota allows: any shrink, and growth the team may
    take on top of what it holds."""
    if holding.team not in ledger.accounts:
        return job.choices
    return tuple(
        choice
        for choice in job.choices
        if choice.learners <= job.current.learners
        or ledger.block(
            holding.team,
            _quota_need(
                holding.gang._replace(learners=choice.learners - job.current.learners),
                holding.gpu_product,
            ),
        )
        is None
    )


def _place(
    free: FreeCapacity, gang: Gang, held: Sequence[str]
) -> tuple[tuple[str, ...], str | None] | None:
    """Where `gang` goes once the job gives back the learners it holds on `held`."""
    per = Gang(1, gang.gpus, gang.gpu_product, gang.millicpus, gang.memory)
    held = [node for node in held if node in free.index]
    for node in held:
        free.give(free.index[node], per.gpus, per.millicpus, per.memory)
    for product in sorted(candidate_products(gang, free.products()), key=str):
        placement = free.place(gang, product)
        if placement is not None:
            return placement.nodes, placement.gpu_product
    for node in held:
        free.take(free.index[node], per.gpus, per.millicpus, per.memory)
    return None


def _shrink(free: FreeCapacity, job: RunningJob, old: Choice, new: Choice, reason: str) -> Resize:
    """A shrink keeps the first learners where they are and gives back the others' room."""
    for node in job.nodes[new.learners :]:
        if node in free.index:
            free.give(free.index[node], job.gang.gpus, job.gang.millicpus, job.gang.memory)
    return Resize(job.id, old, new, job.nodes[: new.learners], job.gpu_product, reason)


def _quota_reason(old: Choice, new: Choice, waiter: PendingJob) -> str:
    return shrink_reason(
        old, new, f"job {waiter.id} of the same team starts within the team's quota"
    )


def _quota_waiter(snapshot: ClusterSnapshot, decided: SchedulePass) -> PendingJob | None:
    """The first job waiting for its own team's quota (not for room)."""
    pending = {job.id: job for job in snapshot.pending}
    for waiting in decided.waiting:
        if waiting.cause is WaitCause.TEAM_QUOTA and waiting.job_id in pending:
            return pending[waiting.job_id]
    return None


def _shrink_for_quota(
    waiter: PendingJob,
    jobs: Sequence[ElasticRunning],
    running: dict[str, RunningJob],
    ledger: QuotaLedger,
) -> dict[str, Choice]:
    """New sizes for the waiter's team's elastic jobs so that its quota takes the waiter:
    one learner at a time off the job that loses the least throughput by it. Nothing
    unless that gets there with every job at or above its smallest size."""
    team = waiter.team
    if team not in ledger.accounts:
        return {}
    trial = ledger.copy()
    sizes = {job.id: job.current for job in jobs if running[job.id].team == team and job.movable}
    choices = {job.id: {c.learners: c for c in job.choices} for job in jobs if job.id in sizes}
    need = need_of(waiter.gang, waiter.gang.gpu_product)
    while trial.block(team, need) is not None:
        smaller = [
            (choices[job_id][size.learners - 1].throughput / size.throughput, job_id)
            for job_id, size in sizes.items()
            if size.learners - 1 in choices[job_id]
        ]
        if not smaller:
            return {}
        _, job_id = max(smaller)
        holding = running[job_id]
        trial.remove(team, _quota_need(holding.gang._replace(learners=1), holding.gpu_product))
        sizes[job_id] = choices[job_id][sizes[job_id].learners - 1]
    return {
        job.id: sizes[job.id] for job in jobs if job.id in sizes and sizes[job.id] != job.current
    }


def _give_back_quota(
    waiter: PendingJob,
    jobs: list[ElasticRunning],
    running: dict[str, RunningJob],
    ledger: QuotaLedger,
    free: FreeCapacity,
    resizes: list[Resize],
) -> list[ElasticRunning]:
    """Shrink the waiter's team's elastic jobs for it (appended to `resizes`, their room
    and quota given back); the jobs as the optimizer then sees them, the team's held at
    their sizes, so that none grows into what was given back."""
    shrunk = _shrink_for_quota(waiter, jobs, running, ledger)
    for job in jobs:
        if job.id not in shrunk:
            continue
        holding, new = running[job.id], shrunk[job.id]
        reason = _quota_reason(job.current, new, waiter)
        resizes.append(_shrink(free, holding, job.current, new, reason))
        fewer = holding.gang._replace(learners=job.current.learners - new.learners)
        ledger.remove(holding.team, _quota_need(fewer, holding.gpu_product))
    return [
        replace(job, current=shrunk.get(job.id, job.current), movable=False)
        if running[job.id].team == waiter.team
        else job
        for job in jobs
    ]


def elastic_pass(
    snapshot: ClusterSnapshot,
    decided: SchedulePass,
    elastic: Iterable[ElasticRunning],
    resize_cost_s: float,
) -> list[Resize]:
    """The resizes of running elastic jobs after `decided`, placed."""
    running = {job.id: job for job in snapshot.running if not job.stopping}
    jobs = [job for job in elastic if job.id in running]
    free = _free_capacity(snapshot, decided)
    ledger = QuotaLedger(snapshot.teams, snapshot.running)
    resizes: list[Resize] = []
    waiter = _quota_waiter(snapshot, decided)
    if waiter is not None:
        jobs = _give_back_quota(waiter, jobs, running, ledger, free, resizes)
    for gpus in (True, False):
        kind = [job for job in jobs if bool(running[job.id].gang.gpus) == gpus]
        if not kind:
            continue
        sized = [
            ElasticJob(
                job.id,
                _unit(running[job.id].gang),
                _within_quota(job, running[job.id], ledger) if job.movable else (job.current,),
                running=True,
            )
            for job in kind
        ]
        held = sum(s.gpus(job.current) for s, job in zip(sized, kind, strict=True))
        smallest = sum(s.gpus(min(s.choices, key=lambda c: c.learners)) for s in sized)
        room = _free_units(free, gpus)
        need, waiter_id = _first_waiting_need(snapshot, decided, gpus)
        if need == 0:
            capacity = held + room
        elif smallest + need <= held + room:
            capacity = held + room - need  # shrink so that the waiting job starts
        else:
            capacity = held  # nothing grows while a job waits that shrinking cannot start
        sizings = [
            Sizing(s, job.current, job.samples_left) for s, job in zip(sized, kind, strict=True)
        ]
        decided_sizes = autoscale(sizings, capacity, resize_cost_s)
        shrinks = [
            r for r in decided_sizes if r.old is not None and r.new.learners < r.old.learners
        ]
        grows = [r for r in decided_sizes if r.old is not None and r.new.learners >= r.old.learners]
        for change in shrinks:
            assert change.old is not None
            reason = change.reason
            if waiter_id is not None and capacity < held:
                reason = shrink_reason(change.old, change.new, f"job {waiter_id} starts")
            resizes.append(_shrink(free, running[change.job_id], change.old, change.new, reason))
        for change in grows:
            assert change.old is not None
            holding = running[change.job_id]
            more = _quota_need(
                holding.gang._replace(learners=change.new.learners - change.old.learners),
                holding.gpu_product,
            )
            team = holding.team
            if team in ledger.accounts and ledger.block(team, more) is not None:
                continue  # past the team's quota and what it may borrow
            placed = _place(
                free, holding.gang._replace(learners=change.new.learners), holding.nodes
            )
            if placed is None:
                continue
            if team in ledger.accounts:
                ledger.add(team, more)
            resizes.append(Resize(change.job_id, change.old, change.new, *placed, change.reason))
    return resizes
