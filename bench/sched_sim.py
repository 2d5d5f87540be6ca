"""The scheduler driving a simulated 256-GPU cluster through a Philly-shaped trace.

A discrete-event simulation of 32 nodes of 8 GPUs (64 CPUs, 512 GiB each) shared by four
teams whose nominal quotas are 96, 64, 64 and 32 GPUs (weights 3, 2, 2, 1; each may borrow
whatever the others leave idle). Jobs arrive as a Poisson process (`--seed`), sized and
timed as in `bench/_philly_trace.py`: mostly 1 GPU, a tail of 8-64 GPU gangs, log-normal
durations, a runtime estimate of 1-2x the true duration. Each team offers load in
proportion to its quota, team d (32 GPUs) twice as much, so that at heavy load every team
has a backlog and d's must be held to its share. Two loads: offered GPU-time of 0.7
(medium) and 1.2 (heavy) times the cluster's, arriving over `--days` (4) and then
drained. A pass runs every 60 simulated seconds in which anything changed.

Policies, all in the same run on the same trace:
- `dlaas`: `lifecycle_manager.scheduler.schedule`, the package itself: quotas with
  borrowing, DRF, gangs, EASY backfill, preemption;
- `fifo`: strict arrival order; a job starts only after every earlier one has (gangs whole,
  no quotas);
- `fifo_gang`: arrival order, but any job whose whole gang fits starts, passing stuck
  gangs (no reservation, no quotas, no preemption).
Placement is the package's best fit (`FreeCapacity.place`) for all three.

Preemption: jobs checkpoint every `--checkpoint-interval` seconds of running (900). A
victim is asked to checkpoint and stop: it writes a checkpoint (`--checkpoint-write`, 60 s)
holding its GPUs, then stops and is requeued with its progress; if its last periodic
checkpoint is more recent than that, it stops at once and loses the time since. Lost work
of a preemption is the time its GPUs ran without progress kept: at most the write time,
never more than one interval.

Figures (the heavy load's, unless suffixed `_medium`; each baseline's under `fifo`,
`fifo_gang`):
- `utilization_heavy`: GPU-seconds held by jobs / (256 x time), from 6 hours after the
  first arrival to the last arrival (target 0.85);
- `mean_jct_s`, `jct_ratio_vs_fifo_heavy`: mean job completion time (arrival to end, every
  job of the trace) and its ratio to strict FIFO's (target 0.75 or less);
- fair share, over 6-hour windows between the same bounds in which every team had jobs
  waiting at every pass: a team's observed share is its GPU-seconds / all teams'
  GPU-seconds in the window; its entitled share is its nominal quota / 256. For each
  window, x_t = observed / entitled; `share_error_max` = the largest |x_t - 1| over teams
  and windows (relative: 0.05 means within 5% of the entitled share; target 0.05),
  `share_error_points_max` the same as an absolute difference of shares, and
  `jain_index_min` the smallest Jain index (sum x_t)^2 / (n sum x_t^2) over windows
  (target 0.95); `fair_windows` how many windows qualified;
- `lost_work_per_preemption_max_s` (target <= `checkpoint_interval_s`), `preemptions`;
- `quota_violations`: passes after which a team held more than its nominal quota plus
  borrowing limit, or the teams more than their nominal total (target 0);
  `capacity_violations`: nodes holding more than they have (all policies; target 0).

Run from the repository root: `python -m bench.sched_sim` (a few minutes). The last line
is the FINAL line, one JSON object `{"bench": "sched_sim", ...}`.
"""

from __future__ import annotations

import argparse
import heapq
import json
import os
import random
import statistics
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field

from bench._latency_stats import rounded
from bench._philly_trace import duration_s, gang_for, job_gpus, mean_gpu_seconds, runtime_estimate_s
from bench._small import parse_with_small
from lifecycle_manager.scheduler import (
    GIB,
    Admission,
    ClusterSnapshot,
    Node,
    PendingJob,
    Quota,
    RunningJob,
    SchedulePass,
    Team,
    schedule,
)
from lifecycle_manager.scheduler.placement import FreeCapacity
from lifecycle_manager.scheduler.quota import QuotaLedger

NODES = 32
GPUS_PER_NODE = 8
QUOTAS = {"a": 96, "b": 64, "c": 64, "d": 32}
DEMAND_FACTOR = {"a": 1.0, "b": 1.0, "c": 1.0, "d": 2.0}  # offered load per entitled GPU
LOADS = {"medium": 0.7, "heavy": 1.2}
PASS_EVERY_S = 60.0
WARMUP_S = 6 * 3600.0
WINDOW_S = 6 * 3600.0
TARGET_UTILIZATION = 0.85
TARGET_JCT_RATIO = 0.75
TARGET_JAIN = 0.95
TARGET_SHARE_ERROR = 0.05

Policy = Callable[[ClusterSnapshot, float], SchedulePass]


def progress(message: str) -> None:
    print(f"[sched_sim] {message}", flush=True)


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seed", type=int, default=11)
    p.add_argument("--days", type=float, default=4.0, help="arrivals span this many days")
    p.add_argument("--checkpoint-interval", type=float, default=900.0)
    p.add_argument("--checkpoint-write", type=float, default=60.0)
    return parse_with_small(p, {"days": 0.1})


# -- the cluster and the trace ---------------------------------------------------------------


def make_nodes() -> tuple[Node, ...]:
    return tuple(Node(f"n{i:02d}", GPUS_PER_NODE, "A100", 64_000, 512 * GIB) for i in range(NODES))


def make_teams() -> tuple[Team, ...]:
    total = sum(QUOTAS.values())
    return tuple(
        Team(name, Quota({"A100": gpus}), Quota({"A100": total - gpus}), weight=gpus / 32)
        for name, gpus in QUOTAS.items()
    )


@dataclass
class TraceJob:
    id: str
    team: str
    gpus: int
    arrival: float
    duration: float
    estimate: float


def make_trace(seed: int, load: float, days: float) -> list[TraceJob]:
    """Poisson arrivals offering `load` x the cluster's GPU-time, split between teams in
    proportion to quota x demand factor."""
    rng = random.Random(seed)
    capacity = NODES * GPUS_PER_NODE
    rate = load * capacity / mean_gpu_seconds()
    weights = {t: QUOTAS[t] * DEMAND_FACTOR[t] for t in QUOTAS}
    teams, team_weights = list(weights), list(weights.values())
    jobs, now, end = [], 0.0, days * 86_400.0
    while True:
        now += rng.expovariate(rate)
        if now > end:
            return jobs
        duration = duration_s(rng)
        jobs.append(
            TraceJob(
                f"j{len(jobs)}",
                rng.choices(teams, team_weights)[0],
                job_gpus(rng),
                now,
                duration,
                runtime_estimate_s(rng, duration),
            )
        )


# -- baseline policies -----------------------------------------------------------------------


def _free_capacity(cluster: ClusterSnapshot) -> FreeCapacity:
    free = FreeCapacity(cluster.nodes)
    for job in cluster.running:
        for name in job.nodes:
            free.take(free.index[name], job.gang.gpus, job.gang.millicpus, job.gang.memory)
    return free


def _arrival_order(cluster: ClusterSnapshot) -> list[PendingJob]:
    return sorted(cluster.pending, key=lambda j: (j.submitted_at, j.id))


def fifo(cluster: ClusterSnapshot, now: float) -> SchedulePass:
    """Strict FIFO: stop at the first job whose gang does not fit."""
    free = _free_capacity(cluster)
    admissions = []
    for job in _arrival_order(cluster):
        placement = free.place(job.gang, job.gang.gpu_product)
        if placement is None:
            break
        admissions.append(Admission(job.id, job.team, placement.nodes, placement.gpu_product))
    return SchedulePass(tuple(admissions), (), ())


def fifo_gang(cluster: ClusterSnapshot, now: float) -> SchedulePass:
    """FIFO order, every gang that fits whole starts; stuck gangs are passed."""
    free = _free_capacity(cluster)
    admissions = []
    for job in _arrival_order(cluster):
        placement = free.place(job.gang, job.gang.gpu_product)
        if placement is not None:
            admissions.append(Admission(job.id, job.team, placement.nodes, placement.gpu_product))
    return SchedulePass(tuple(admissions), (), ())


# -- the simulation --------------------------------------------------------------------------


@dataclass
class Run:
    """A job's stay on the cluster, from a start to its end or preemption."""

    nodes: tuple[str, ...]
    started: float
    done_at_start: float  # seconds of work kept from earlier runs
    stop_at: float | None = None  # when a preempted job has written its checkpoint


@dataclass
class SimJob:
    trace: TraceJob
    pending: PendingJob
    done: float = 0.0  # seconds of work kept (checkpointed)
    run: Run | None = None
    finished: float | None = None


@dataclass
class Accounting:
    """GPU-seconds per team, in total and per fair-share window, between two times."""

    start: float
    end: float
    busy: Counter[str] = field(default_factory=Counter)
    windows: dict[int, Counter[str]] = field(default_factory=lambda: defaultdict(Counter))
    # windows in which some team had no job waiting at some pass
    unfair: set[int] = field(default_factory=set)

    def add(self, team: str, gpus: int, t0: float, t1: float) -> None:
        t0, t1 = max(t0, self.start), min(t1, self.end)
        while t0 < t1:
            window = int((t0 - self.start) // WINDOW_S)
            edge = min(t1, self.start + (window + 1) * WINDOW_S)
            self.busy[team] += gpus * (edge - t0)
            self.windows[window][team] += gpus * (edge - t0)
            t0 = edge

    def saw_demand(self, now: float, teams_waiting: set[str]) -> None:
        if self.start <= now < self.end and teams_waiting != set(QUOTAS):
            self.unfair.add(int((now - self.start) // WINDOW_S))


class Simulation:
    def __init__(
        self, trace: list[TraceJob], policy: Policy, interval: float, write: float
    ) -> None:
        self.nodes = make_nodes()
        self.teams = make_teams()
        self.policy = policy
        self.interval = interval
        self.write = write
        self.jobs = {
            t.id: SimJob(
                t,
                PendingJob(t.id, t.team, gang_for(t.gpus, "A100"), t.arrival, 0, t.estimate),
            )
            for t in trace
        }
        self.events: list[tuple[float, int, str, str]] = []
        for t in trace:
            self._at(t.arrival, "arrive", t.id)
        self.waiting: dict[str, SimJob] = {}
        self.running: dict[str, SimJob] = {}
        last_arrival = trace[-1].arrival if trace else 0.0
        self.accounting = Accounting(WARMUP_S, last_arrival)
        self.lost: list[float] = []
        self.quota_violations = 0
        self.capacity_violations = 0
        self.passes = 0
        self.pass_s = 0.0

    def _at(self, when: float, kind: str, job_id: str) -> None:
        heapq.heappush(self.events, (when, len(self.events), kind, job_id))

    def run(self) -> None:
        now, last_pass, changed = 0.0, -PASS_EVERY_S, False
        while self.events or (changed and self.waiting):
            next_pass = last_pass + PASS_EVERY_S if changed else float("inf")
            if self.events and self.events[0][0] < next_pass:
                now, _, kind, job_id = heapq.heappop(self.events)
                changed |= self._handle(now, kind, job_id)
                continue
            now = max(next_pass, now)
            self._pass(now)
            last_pass, changed = now, False

    def _handle(self, now: float, kind: str, job_id: str) -> bool:
        job = self.jobs[job_id]
        if kind == "arrive":
            self.waiting[job_id] = job
            return True
        run = job.run
        if run is None:
            return False
        if kind == "end" and run.stop_at is None:
            job.done = job.trace.duration
            job.finished = now
            self._leave(job, now)
            return True
        if kind == "stop" and run.stop_at == now:
            self._leave(job, now)
            job.pending = PendingJob(
                job_id,
                job.trace.team,
                job.pending.gang,
                job.trace.arrival,
                0,
                max(job.trace.estimate - job.done, 60.0),
            )
            self.waiting[job_id] = job
            return True
        return False

    def _leave(self, job: SimJob, now: float) -> None:
        run = job.run
        assert run is not None
        gang = job.pending.gang
        self.accounting.add(job.trace.team, gang.learners * gang.gpus, run.started, now)
        del self.running[job.trace.id]
        job.run = None

    def _snapshot(self, now: float) -> ClusterSnapshot:
        running = []
        for job in self.running.values():
            run = job.run
            assert run is not None
            ran = now - run.started
            checkpoint = run.started + (ran // self.interval) * self.interval
            running.append(
                RunningJob(
                    job.trace.id,
                    job.trace.team,
                    job.pending.gang,
                    run.nodes,
                    run.started,
                    0,
                    "A100",
                    max(job.trace.estimate - run.done_at_start, 60.0),
                    checkpoint if ran >= self.interval else None,
                    stopping=run.stop_at is not None,
                )
            )
        pending = tuple(job.pending for job in self.waiting.values())
        return ClusterSnapshot(self.nodes, self.teams, tuple(running), pending)

    def _pass(self, now: float) -> None:
        cluster = self._snapshot(now)
        self.accounting.saw_demand(now, {job.trace.team for job in self.waiting.values()})
        started = time.perf_counter()
        decided = self.policy(cluster, now)
        self.pass_s += time.perf_counter() - started
        self.passes += 1
        for preemption in decided.preemptions:
            self._preempt(self.running[preemption.victim_id], now)
        for admission in decided.admissions:
            job = self.waiting.pop(admission.job_id)
            job.run = Run(admission.nodes, now, job.done)
            self.running[admission.job_id] = job
            self._at(now + job.trace.duration - job.done, "end", admission.job_id)
        self._check_limits(now)

    def _preempt(self, job: SimJob, now: float) -> None:
        run = job.run
        assert run is not None
        ran = now - run.started
        since_checkpoint = ran % self.interval if ran >= self.interval else ran
        if since_checkpoint <= self.write and ran >= self.interval:
            # a checkpoint this recent is cheaper to fall back to than writing another
            job.done = run.done_at_start + ran - since_checkpoint
            lost, stop = since_checkpoint, now
        else:
            job.done = run.done_at_start + ran
            lost, stop = self.write, now + self.write
        job.done = min(job.done, job.trace.duration)
        self.lost.append(lost)
        run.stop_at = stop
        self._at(stop, "stop", job.trace.id)

    def _check_limits(self, now: float) -> None:
        held: Counter[str] = Counter()
        running = []
        for job in self.running.values():
            assert job.run is not None
            for name in job.run.nodes:
                held[name] += job.pending.gang.gpus
            running.append(
                RunningJob(
                    job.trace.id, job.trace.team, job.pending.gang, job.run.nodes, 0.0, 0, "A100"
                )
            )
        self.capacity_violations += sum(1 for n in self.nodes if held[n.name] > n.gpus)
        if QuotaLedger(self.teams, running).violations():
            self.quota_violations += 1

    def figures(self) -> dict[str, object]:
        jobs = list(self.jobs.values())
        jct = [j.finished - j.trace.arrival for j in jobs if j.finished is not None]
        span = self.accounting.end - self.accounting.start
        capacity = NODES * GPUS_PER_NODE
        fair = fair_share(self.accounting)
        return {
            "utilization": rounded(sum(self.accounting.busy.values()) / (capacity * span)),
            "mean_jct_s": rounded(statistics.fmean(jct), 1),
            "median_jct_s": rounded(statistics.median(jct), 1),
            "jobs": len(jobs),
            "unfinished": len(jobs) - len(jct),
            **fair,
            "preemptions": len(self.lost),
            "lost_work_per_preemption_max_s": rounded(max(self.lost, default=0.0), 1),
            "lost_work_per_preemption_mean_s": rounded(
                statistics.fmean(self.lost) if self.lost else 0.0, 1
            ),
            "quota_violations": self.quota_violations,
            "capacity_violations": self.capacity_violations,
            "passes": self.passes,
            "pass_ms_mean": rounded(1000 * self.pass_s / max(self.passes, 1), 2),
        }


def fair_share(accounting: Accounting) -> dict[str, object]:
    """Share error and Jain index over the windows in which every team always had demand
    (see the module's docstring)."""
    total_quota = sum(QUOTAS.values())
    entitled = {t: q / total_quota for t, q in QUOTAS.items()}
    errors, points, jain = [], [], []
    for window, used in sorted(accounting.windows.items()):
        all_used = sum(used.values())
        if window in accounting.unfair or not all_used:
            continue
        if accounting.start + (window + 1) * WINDOW_S > accounting.end:
            continue  # a partial last window
        x = [used[t] / all_used / entitled[t] for t in QUOTAS]
        errors.append(max(abs(v - 1) for v in x))
        points.append(max(abs(used[t] / all_used - entitled[t]) for t in QUOTAS))
        jain.append(sum(x) ** 2 / (len(x) * sum(v * v for v in x)))
    return {
        "fair_windows": len(errors),
        "share_error_max": rounded(max(errors)) if errors else None,
        "share_error_mean": rounded(statistics.fmean(errors)) if errors else None,
        "share_error_points_max": rounded(max(points)) if points else None,
        "jain_index_min": rounded(min(jain)) if jain else None,
        "team_gpu_share": {
            t: rounded(accounting.busy[t] / max(sum(accounting.busy.values()), 1.0)) for t in QUOTAS
        },
    }


def main() -> None:
    args = parse_args()
    policies: dict[str, Policy] = {"dlaas": schedule, "fifo": fifo, "fifo_gang": fifo_gang}
    results: dict[str, dict[str, dict[str, object]]] = {}
    for load_name, load in LOADS.items():
        trace = make_trace(args.seed, load, args.days)
        gpu_s = sum(t.gpus * t.duration for t in trace)
        progress(
            f"{load_name} load {load}: {len(trace)} jobs, offered "
            f"{gpu_s / (NODES * GPUS_PER_NODE * args.days * 86_400):.2f} of the cluster"
        )
        for name, policy in policies.items():
            started = time.perf_counter()
            sim = Simulation(trace, policy, args.checkpoint_interval, args.checkpoint_write)
            sim.run()
            figures = sim.figures()
            results.setdefault(load_name, {})[name] = figures
            progress(
                f"{load_name} {name}: utilization {figures['utilization']}, mean JCT "
                f"{figures['mean_jct_s']} s, Jain min {figures['jain_index_min']}, share "
                f"error max {figures['share_error_max']}, preemptions {figures['preemptions']}"
                f", {figures['passes']} passes of {figures['pass_ms_mean']} ms mean, "
                f"{time.perf_counter() - started:.0f} s"
            )
    heavy, medium = results["heavy"], results["medium"]
    final: dict[str, object] = {
        "bench": "sched_sim",
        "seed": args.seed,
        "days": args.days,
        "utilization_heavy": heavy["dlaas"]["utilization"],
        "jct_ratio_vs_fifo_heavy": _ratio(heavy, "mean_jct_s"),
        "jain_index_min": heavy["dlaas"]["jain_index_min"],
        "share_error_max": heavy["dlaas"]["share_error_max"],
        "share_error_points_max": heavy["dlaas"]["share_error_points_max"],
        "fair_windows": heavy["dlaas"]["fair_windows"],
        "lost_work_per_preemption_max_s": max(
            float(r["dlaas"]["lost_work_per_preemption_max_s"])  # type: ignore[arg-type]
            for r in results.values()
        ),
        "checkpoint_interval_s": args.checkpoint_interval,
        "checkpoint_write_s": args.checkpoint_write,
        "quota_violations": sum(int(r["dlaas"]["quota_violations"]) for r in results.values()),  # type: ignore[call-overload]
        "utilization_medium": medium["dlaas"]["utilization"],
        "jct_ratio_vs_fifo_medium": _ratio(medium, "mean_jct_s"),
        "jct_ratio_vs_fifo_gang_heavy": _ratio(heavy, "mean_jct_s", "fifo_gang"),
        "heavy": heavy,
        "medium": medium,
        "target_utilization_heavy": TARGET_UTILIZATION,
        "target_jct_ratio_vs_fifo_heavy": TARGET_JCT_RATIO,
        "target_jain_index_min": TARGET_JAIN,
        "target_share_error_max": TARGET_SHARE_ERROR,
        "target_lost_work_per_preemption_max_s": args.checkpoint_interval,
        "target_quota_violations": 0,
        "machine_cores": os.cpu_count(),
    }
    print(json.dumps(final), flush=True)


def _ratio(results: dict[str, dict[str, object]], key: str, baseline: str = "fifo") -> float | None:
    ours, theirs = results["dlaas"][key], results[baseline][key]
    return rounded(float(ours) / float(theirs)) if ours and theirs else None  # type: ignore[arg-type]


if __name__ == "__main__":
    main()
