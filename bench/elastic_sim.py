"""Elastic jobs on a simulated 64-GPU cluster: the service's scheduler and autoscaler against
three baselines.

A trace built like Saxena et al.'s (arXiv 2006.13878): Poisson arrivals over `--days`, each
job asking for 1, 2, 4 or 8 GPUs (half of them 1) and a per-GPU batch of 32, 64 or 128,
which may run with any global batch from half to four times what it asked for (at most
twice its per-GPU batch on a GPU: memory) and 1 to 16 learners. Its step time comes from
`storage.performance_model` with costs drawn at random (compute per
sample and per step, 20-400 MiB of gradients over 10 Gb/s links with all-reduce), so
throughput grows sub-linearly with learners, and more so with a larger batch; its work is
the samples it must process (the same at any batch in its range), so that at its request it
would run a log-normal time (median an hour). Loads: the GPU-time the jobs would take at
their requests, 0.5 (light), 0.8 (medium) and 1.2 (heavy) times the cluster's.

The cluster: 8 nodes of 8 GPUs, one team whose quota is all of them (the trace is one
organisation's; quotas between teams are `bench/sched_sim.py`'s subject).

Policies, all on the same trace:
- `dlaas`: exactly the service's decisions, in the order it takes them
  (`lifecycle_manager.glue.operations.schedule_pass`). A scheduling pass
  (`lifecycle_manager.scheduler.schedule`) admits queued jobs at the learners they ask for,
  on the nodes it names; then, on the cluster with them started,
  `lifecycle_manager.scheduler.elastic_pass` resizes running elastic jobs: it shrinks them
  when that lets the first job waiting for room start, grows them into free room only when
  the growth repays its restart (`--resize-cost`, 30 s of no progress per resize) and no
  job waits that shrinking cannot start, and places growths by best fit. Each job may run
  1-16 learners, each count with the largest batch of its range (as the service's
  `throughput_curve` does), and the curve is the truth: the sim's jobs run as predicted.
  A job keeps its size for `AUTOSCALE_INTERVAL_S` after it starts or a resize's restart
  ends (the service's `movable`), and a restarting job is not sized at all (RESCALING).
  `--autoscale-interval` changes that interval; `--team-quota unset` leaves the team's
  quota unset, which the service counts as unlimited, so jobs wait for room, not quota.
  A pass runs at every arrival and end, when a job's interval ends, 5 s after a pass that
  changed something (the service's sweep) and every 5 minutes;
- `paper_baseline`: the same path, but each job keeps the global batch it asked for over
  any learner count that holds it (at most twice its per-GPU batch on a GPU). This is
  Saxena et al.'s baseline, "a strong baseline that also scales the number of GPUs but does
  not change the batch size": the same scheduler and autoscaler, so the difference measured
  is the batch range alone;
- `fifo`: no elasticity; jobs start in arrival order at their request, none passing another;
- `tiresias`: no elasticity; least attained service first (two queues, the first for jobs
  that have had under an hour of GPU time, arrival order within each), preempting running
  jobs, skipping jobs that do not fit; a preempted job pays the restart when it resumes.

Figures per load and policy: `completed_in_horizon` (jobs ended by the last arrival),
`mean_jct_s` (every job, arrival to end, the cluster drained after the last arrival),
`median_jct_s`, `mean_wait_s` (arrival to first start), `utilization` (GPU-seconds held /
64 x the horizon), `paused` (the share of them held by jobs restarting after a resize or
a preemption), `idle_while_waiting` (GPUs free while a job waited, the same way),
`resizes`. The FINAL line's headline keys are the heavy load's:
`jobs_completed_ratio_vs_paper` (ours over the paper's baseline; target 2 or more),
`mean_jct_ratio_vs_paper` (target 0.2 or less) and `mean_jct_ratio_vs_tiresias` (target
0.7 or less); and `floor_gpu_time_ratio_paper_vs_dlaas`, the GPU-time the heavy trace's
jobs need at their floors with the batch they asked for over the same with the batch
free: a long queue shrinks every job towards its floor, so this bounds how many more jobs
`dlaas` can end than `paper_baseline` once both are overloaded.

Run from the repository root: `python -m bench.elastic_sim` (about a minute). The last
line
is the FINAL line, one JSON object `{"bench": "elastic_sim", ...}`.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from bench._latency_stats import rounded
from bench._small import parse_with_small
from lifecycle_manager.scheduler import (
    GIB,
    ClusterSnapshot,
    Gang,
    Node,
    PendingJob,
    Quota,
    RunningJob,
    SchedulePass,
    Team,
    schedule,
)
from lifecycle_manager.scheduler.elastic_optimizer import Choice
from lifecycle_manager.scheduler.elastic_pass import ElasticRunning, elastic_pass
from storage.performance_model import Exchange, ModelCosts, Network, throughput

NODES = tuple(Node(f"n{i}", 8, "A100", 64_000, 512 * GIB) for i in range(8))
GPUS = sum(node.gpus for node in NODES)
TEAM = "t"  # one team, its quota the whole cluster: the trace is one organisation's
QUOTAS = {
    "cluster": Quota({"A100": GPUS}),  # the team's quota set to the whole cluster
    "unset": Quota({"A100": 1 << 40}),  # never set: the service counts it as unlimited
}
MAX_LEARNERS = 16
LOADS = {"light": 0.5, "medium": 0.8, "heavy": 1.2}
ASKED_GPUS = (1, 1, 1, 1, 1, 2, 2, 4, 4, 8)
PASS_EVERY_S = 300.0
# A job keeps its size this long after it starts running at a size (a start, or a resize's
# restart ended): the service's `DLAAS_AUTOSCALE_INTERVAL_S` at its default, since the
# trace's times are real seconds and these figures are meant to be the service's as shipped.
AUTOSCALE_INTERVAL_S = 60.0
# The service's sweep (`RECONCILE_EVERY_S`) runs a pass every 5 s while a job is queued or
# an elastic job runs: a pass that changed something is followed by another this soon.
SWEEP_S = 5.0
TIRESIAS_THRESHOLD_GPU_S = 3600.0
NETWORK = Network(bandwidth_bytes_s=1.25e9, latency_s=5e-5)
TARGETS = {
    "jobs_completed_ratio_vs_paper": 2.0,
    "mean_jct_ratio_vs_paper": 0.2,
    "mean_jct_ratio_vs_tiresias": 0.7,
}


@dataclass(frozen=True)
class TraceJob:
    id: str
    arrival: float
    asked: Choice  # what the user asked for: learners, batch, its throughput
    samples: float
    elastic: tuple[Choice, ...]  # any batch in range: the largest each learner count may run
    fixed_batch: tuple[Choice, ...]  # the asked batch over other learner counts


def make_trace(seed: int, load: float, days: float) -> list[TraceJob]:
    rng = random.Random(seed)
    jobs: list[TraceJob] = []
    drawn = [_draw_job(rng, i) for i in range(2000)]
    mean_gpu_s = statistics.fmean(j.asked.learners * j.samples / j.asked.throughput for j in drawn)
    rate = load * GPUS / mean_gpu_s
    now, horizon = 0.0, days * 86_400
    index = 0
    while True:
        now += rng.expovariate(rate)
        if now > horizon:
            return jobs
        template = drawn[index % len(drawn)]
        index += 1
        jobs.append(
            TraceJob(
                f"j{index}",
                now,
                template.asked,
                template.samples,
                template.elastic,
                template.fixed_batch,
            )
        )


def _draw_job(rng: random.Random, index: int) -> TraceJob:
    costs = ModelCosts(
        sample_s=rng.uniform(1e-3, 5e-3),
        step_overhead_s=rng.uniform(0.01, 0.05),
        model_bytes=rng.choice([20, 100, 400]) << 20,
    )
    learners = rng.choice(ASKED_GPUS)
    per_gpu = rng.choice([32, 64, 128])
    batch = learners * per_gpu
    smallest, largest, most_per_gpu = batch // 2, batch * 4, per_gpu * 2

    def choice(n: int, global_batch: int) -> Choice:
        return Choice(
            n, global_batch, throughput(costs, NETWORK, n, global_batch, Exchange.ALL_REDUCE)
        )

    asked = choice(learners, batch)
    elastic = tuple(
        choice(n, min(largest, n * most_per_gpu))
        for n in range(1, MAX_LEARNERS + 1)
        if min(largest, n * most_per_gpu) >= max(smallest, n)
    )
    fixed = tuple(
        choice(n, batch) for n in range(1, MAX_LEARNERS + 1) if n <= batch <= n * most_per_gpu
    )
    duration = rng.lognormvariate(math.log(3600.0), 1.0)
    return TraceJob(f"t{index}", 0.0, asked, duration * asked.throughput, elastic, fixed)


@dataclass
class SimJob:
    trace: TraceJob
    choices: tuple[Choice, ...]
    done: float = 0.0
    current: Choice | None = None
    paused_until: float = 0.0  # restarting after a resize or a preemption: no progress
    attained_gpu_s: float = 0.0
    ended: float | None = None
    preempted: bool = False
    nodes: list[str] = field(default_factory=list)  # learner i's node, learner 1 first
    started: float | None = None
    running_since: float = 0.0  # when it last started, or a restart at a new size ended

    @property
    def floor(self) -> int:
        return min(c.learners for c in self.choices)

    def rate(self) -> float:
        return self.current.throughput if self.current else 0.0

    def ends_at(self, now: float) -> float:
        start = max(now, self.paused_until)
        return start + (self.trace.samples - self.done) / self.rate()


@dataclass
class Simulation:
    trace: list[TraceJob]
    policy_name: str
    resize_cost_s: float
    autoscale_interval_s: float = AUTOSCALE_INTERVAL_S
    teams: tuple[Team, ...] = (Team(TEAM, QUOTAS["cluster"]),)
    jobs: list[SimJob] = field(default_factory=list)
    resizes: int = 0
    busy_gpu_s: float = 0.0
    paused_gpu_s: float = 0.0  # held by jobs restarting after a resize or a preemption
    idle_waiting_gpu_s: float = 0.0  # free while some job waited
    horizon: float = 0.0
    completed_in_horizon: int = 0
    free: dict[str, int] = field(default_factory=lambda: {n.name: n.gpus for n in NODES})
    wake: float = math.inf  # the policy asks for its next pass by then

    def __post_init__(self) -> None:
        fixed = self.policy_name == "paper_baseline"
        for t in self.trace:
            choices = (
                t.fixed_batch if fixed else t.elastic if self.policy_name == "dlaas" else (t.asked,)
            )
            self.jobs.append(SimJob(t, choices))
        self.horizon = self.trace[-1].arrival if self.trace else 0.0

    def run(self) -> None:
        policy = POLICIES[self.policy_name]
        arrivals = iter(self.jobs)
        upcoming = next(arrivals, None)
        active: list[SimJob] = []
        now, next_pass = 0.0, 0.0
        while upcoming is not None or active:
            running = [j for j in active if j.current is not None]
            times = [j.ends_at(now) for j in running]
            end = min(times) if times else math.inf
            arrive = upcoming.trace.arrival if upcoming is not None else math.inf
            tick = next_pass if active else math.inf  # re-weighs everything now and then
            at = min(end, arrive, tick)
            self._advance(running, now, at, waiting=len(active) > len(running))
            now = at
            if at == end:
                for job in running:
                    if job.trace.samples - job.done <= 1e-6 * job.trace.samples:
                        job.ended = now
                        self._hold(job, None)
                        if now <= self.horizon:
                            self.completed_in_horizon += 1
                active = [j for j in active if j.ended is None]
            elif at == arrive:
                assert upcoming is not None
                active.append(upcoming)
                upcoming = next(arrivals, None)
            self.wake = math.inf
            policy(self, now, active)
            next_pass = min(now + PASS_EVERY_S, max(self.wake, now))

    def _advance(self, running: list[SimJob], now: float, until: float, waiting: bool) -> None:
        span = min(until, self.horizon) - min(now, self.horizon)
        if waiting:
            self.idle_waiting_gpu_s += sum(self.free.values()) * span
        for job in running:
            assert job.current is not None
            gpus = job.current.learners
            self.busy_gpu_s += gpus * span
            job.attained_gpu_s += gpus * (until - now)
            paused = min(until, job.paused_until, self.horizon) - min(now, self.horizon)
            self.paused_gpu_s += gpus * max(0.0, paused)
            working = until - max(now, job.paused_until)
            if working > 0:
                job.done = min(job.trace.samples, job.done + working * job.rate())

    def start(self, job: SimJob, choice: Choice, now: float, on: tuple[str, ...] = ()) -> None:
        if job.preempted:  # resuming from its checkpoint
            job.paused_until = now + self.resize_cost_s
            job.preempted = False
        if job.started is None:
            job.started = now
        job.running_since = max(now, job.paused_until)
        self._hold(job, choice, on)

    def resize(self, job: SimJob, choice: Choice, now: float, on: tuple[str, ...]) -> None:
        """Checkpoint, stop and restart `job` with `choice`, learner i on `on[i - 1]`."""
        self._hold(job, None)
        self._hold(job, choice, on)
        job.paused_until = job.running_since = now + self.resize_cost_s
        self.resizes += 1

    def stop(self, job: SimJob) -> None:
        """Preempted: back to the queue, its progress kept (checkpointed)."""
        self._hold(job, None)
        job.preempted = True

    def _hold(self, job: SimJob, choice: Choice | None, on: tuple[str, ...] = ()) -> None:
        """Run `job` with `choice` (None: not at all): a shrink stops its last learners, a
        growth places the new ones on `on` (where the scheduler put them, if it did), or
        else wherever most GPUs are free."""
        learners = choice.learners if choice is not None else 0
        while len(job.nodes) > learners:
            self.free[job.nodes.pop()] += 1
        while len(job.nodes) < learners:
            node = on[len(job.nodes)] if on else max(self.free, key=self.free.__getitem__)
            if self.free[node] <= 0:
                raise RuntimeError(f"no GPU left for {job.trace.id}: the policy overcommitted")
            self.free[node] -= 1
            job.nodes.append(node)
        job.current = choice

    def figures(self) -> dict[str, object]:
        jct = [j.ended - j.trace.arrival for j in self.jobs if j.ended is not None]
        waits = [j.started - j.trace.arrival for j in self.jobs if j.started is not None]
        capacity = GPUS * self.horizon
        return {
            "jobs": len(self.jobs),
            "completed_in_horizon": self.completed_in_horizon,
            "mean_jct_s": rounded(statistics.fmean(jct), 1),
            "median_jct_s": rounded(statistics.median(jct), 1),
            "mean_wait_s": rounded(statistics.fmean(waits), 1),
            "utilization": rounded(self.busy_gpu_s / capacity, 3),
            "idle_while_waiting": rounded(self.idle_waiting_gpu_s / capacity, 4),
            "paused": rounded(self.paused_gpu_s / capacity, 4),
            "resizes": self.resizes,
        }


def _gang(learners: int) -> Gang:
    return Gang(learners, 1, "A100", 1000, GIB)  # a GPU a learner


def _cluster(active: list[SimJob], teams: tuple[Team, ...]) -> ClusterSnapshot:
    """The cluster as the service's scheduler reads it: the jobs holding GPUs with the
    nodes of each learner, and the queued ones at the size they ask for."""
    return ClusterSnapshot(
        NODES,
        teams,
        tuple(
            RunningJob(
                j.trace.id,
                TEAM,
                _gang(len(j.nodes)),
                tuple(j.nodes),
                j.started if j.started is not None else 0.0,
                gpu_product="A100",
            )
            for j in active
            if j.current is not None
        ),
        tuple(
            PendingJob(j.trace.id, TEAM, _gang(j.trace.asked.learners), j.trace.arrival)
            for j in active
            if j.current is None
        ),
    )


def elastic_policy(sim: Simulation, now: float, active: list[SimJob]) -> None:
    """The service's step (`glue.operations.schedule_pass`): a scheduling pass admits
    queued jobs at the size they ask for, where it says; then, on the cluster with them
    started, `elastic_pass` resizes the running elastic jobs (`glue.autoscaling`)."""
    by_id = {j.trace.id: j for j in active}
    decided = schedule(_cluster(active, sim.teams), now)
    for preemption in decided.preemptions:  # one team, one priority: none expected
        sim.stop(by_id[preemption.victim_id])
    for admission in decided.admissions:
        job = by_id[admission.job_id]
        asked = next(c for c in job.choices if c.learners == len(admission.nodes))
        sim.start(job, asked, now, admission.nodes)
    # As the glue does: the snapshot is read after the pass committed, so the admitted jobs
    # hold their room in it, and the pass is handed on with its waiting jobs alone.
    elastic = [
        ElasticRunning(
            j.trace.id,
            j.choices,
            j.current,
            j.trace.samples - j.done,
            movable=now >= j.running_since + sim.autoscale_interval_s,
        )
        for j in active
        # RUNNING, not restarting (RESCALING), and elastic (more than one learner count)
        if j.current is not None and j.paused_until <= now and len(j.choices) > 1
    ]
    after = SchedulePass(admissions=(), preemptions=(), waiting=decided.waiting)
    resizes = elastic_pass(_cluster(active, sim.teams), after, elastic, sim.resize_cost_s)
    for resize in resizes:  # shrinks first: the GPUs they give back are what growths take
        sim.resize(by_id[resize.job_id], resize.new, now, resize.nodes)
    settling = [
        j.running_since + sim.autoscale_interval_s
        for j in active
        if j.current is not None and j.running_since + sim.autoscale_interval_s > now
    ]
    sim.wake = min(settling, default=math.inf)
    if decided.admissions or decided.preemptions or resizes:
        sim.wake = min(sim.wake, now + SWEEP_S)


def fifo_policy(sim: Simulation, now: float, active: list[SimJob]) -> None:
    free = GPUS - sum(j.current.learners for j in active if j.current is not None)
    for job in active:
        if job.current is not None:
            continue
        if job.trace.asked.learners > free:
            return  # strict arrival order: nobody passes a job that waits
        sim.start(job, job.trace.asked, now)
        free -= job.trace.asked.learners


def tiresias_policy(sim: Simulation, now: float, active: list[SimJob]) -> None:
    """Discretised least attained service: jobs under the threshold first, arrival order
    within a queue; the ones that fit run, the others (running ones too) wait."""
    order = sorted(
        active, key=lambda j: (j.attained_gpu_s >= TIRESIAS_THRESHOLD_GPU_S, j.trace.arrival)
    )
    free, chosen = GPUS, []
    for job in order:
        if job.trace.asked.learners <= free:
            chosen.append(job)
            free -= job.trace.asked.learners
    keep = {id(j) for j in chosen}
    for job in active:
        if job.current is not None and id(job) not in keep:
            sim.stop(job)
    for job in chosen:
        if job.current is None:
            sim.start(job, job.trace.asked, now)


POLICIES: dict[str, Callable[[Simulation, float, list[SimJob]], None]] = {
    "dlaas": elastic_policy,
    "paper_baseline": elastic_policy,
    "fifo": fifo_policy,
    "tiresias": tiresias_policy,
}


def floor_gpu_time_ratio(trace: list[TraceJob]) -> float | None:
    """The GPU-time the trace's jobs need at their floors with the batch they asked for
    (the paper's baseline), over the same with the batch free (dlaas). A long queue shrinks
    every job towards its floor, and here a job's floor is also its least GPU-time, so this
    bounds how many more jobs dlaas can end than the baseline when both are overloaded."""

    def gpu_s(choices: tuple[Choice, ...], samples: float) -> float:
        floor = min(choices, key=lambda c: c.learners)
        return floor.learners * samples / floor.throughput

    fixed = sum(gpu_s(t.fixed_batch, t.samples) for t in trace)
    free = sum(gpu_s(t.elastic, t.samples) for t in trace)
    return rounded(fixed / free, 3) if free else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--days", type=float, default=2.0)
    parser.add_argument("--resize-cost", type=float, default=30.0)
    parser.add_argument(
        "--autoscale-interval",
        type=float,
        default=AUTOSCALE_INTERVAL_S,
        help="seconds a job keeps its size after it starts or resizes",
    )
    parser.add_argument(
        "--team-quota",
        choices=sorted(QUOTAS),
        default="cluster",
        help="the one team's quota: the whole cluster, or never set (unlimited)",
    )
    args = parse_with_small(parser, {"days": 0.1})
    results: dict[str, dict[str, dict[str, object]]] = {}
    floor_ratio: float | None = None
    for load_name, load in LOADS.items():
        trace = make_trace(args.seed, load, args.days)
        if load_name == "heavy":
            floor_ratio = floor_gpu_time_ratio(trace)
        for policy in POLICIES:
            started = time.perf_counter()
            sim = Simulation(
                trace,
                policy,
                args.resize_cost,
                args.autoscale_interval,
                (Team(TEAM, QUOTAS[args.team_quota]),),
            )
            sim.run()
            figures = results.setdefault(load_name, {})[policy] = sim.figures()
            print(
                f"[elastic_sim] {load_name} {policy}: {figures['completed_in_horizon']} of "
                f"{figures['jobs']} done in the horizon, mean JCT {figures['mean_jct_s']} s "
                f"(waiting {figures['mean_wait_s']} s), utilization {figures['utilization']}, "
                f"paused {figures['paused']}, resizes {figures['resizes']}, "
                f"{time.perf_counter() - started:.0f} s",
                flush=True,
            )
    heavy = results["heavy"]

    def ratio(key: str, ours: str, theirs: str) -> float | None:
        return rounded(float(heavy[ours][key]) / float(heavy[theirs][key]), 3)  # type: ignore[arg-type]

    final: dict[str, object] = {
        "bench": "elastic_sim",
        "seed": args.seed,
        "days": args.days,
        "resize_cost_s": args.resize_cost,
        "autoscale_interval_s": args.autoscale_interval,
        "team_quota": args.team_quota,
        "jobs_completed_ratio_vs_paper": ratio("completed_in_horizon", "dlaas", "paper_baseline"),
        "mean_jct_ratio_vs_paper": ratio("mean_jct_s", "dlaas", "paper_baseline"),
        "mean_jct_ratio_vs_tiresias": ratio("mean_jct_s", "dlaas", "tiresias"),
        "mean_jct_ratio_vs_fifo": ratio("mean_jct_s", "dlaas", "fifo"),
        "floor_gpu_time_ratio_paper_vs_dlaas": floor_ratio,
        **{f"target_{key}": value for key, value in TARGETS.items()},
        **results,
    }
    print(json.dumps(final), flush=True)


if __name__ == "__main__":
    main()
