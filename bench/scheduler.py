"""How long one scheduling pass takes over a large, busy cluster.

1,000 nodes of 8 GPUs (700 A100, 300 V100; 64 CPUs and 1 TiB each), 50 teams whose
nominal quotas add up to the cluster (weights 1 to 3, each may borrow as much again). The
scheduler itself fills the cluster: jobs of Philly-like sizes (`bench/_philly_trace.py`; a
fifth naming no GPU product, priorities 0-3) are offered to the empty cluster, then the
pending set to be measured, each through passes that start what is admitted and remove the
victims, until a pass preempts almost nothing (the state a scheduler running every few
seconds keeps). Then 15% of the running jobs end at random, leaving holes, and as many new
jobs arrive as started, so the measured pass sees 1,000, 10,000 or 100,000 pending jobs.
Running jobs started in the last 6 hours and checkpointed since. Each size is timed
`--repeats` times (100k: a third) after one unmeasured pass; the figures are medians.

Baseline in the same run (`floor_ms_median_*`): the least any pass must do in Python for
the same jobs: sort them by priority and submission and build one `Waiting` per job.

Figures: `pass_ms_median_1k`, `pass_ms_median_10k` (target 100), `pass_ms_median_100k`,
`..._p90_...`, the floors and `ratio_pass_to_floor_10k`, and what the 10k pass decided
(`admitted_10k`, `preempted_10k`, `waiting_10k`, `refused_10k`).

Run from the repository root: `python -m bench.scheduler` (about a minute). The last line
is the FINAL line, one JSON object `{"bench": "scheduler", ...}`.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import time
from collections.abc import Callable

from bench._latency_stats import median, percentile, rounded
from bench._philly_trace import duration_s, gang_for, job_gpus, runtime_estimate_s
from bench._small import parse_with_small
from lifecycle_manager.scheduler import (
    GIB,
    Admission,
    ClusterSnapshot,
    Node,
    PendingJob,
    Quota,
    RunningJob,
    Team,
    WaitCause,
    Waiting,
    schedule,
)

TARGET_PASS_MS_10K = 100.0
PRODUCTS = {"A100": 700, "V100": 300}
TEAMS = 50
FILL_GPUS = 0.97  # offered to the empty cluster; quotas and fragmentation admit less
ENDED_SHARE = 0.15
SETTLE_PASSES = 6
SIZES = {"1k": 1_000, "10k": 10_000, "100k": 100_000}


def progress(message: str) -> None:
    print(f"[scheduler] {message}", flush=True)


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--repeats", type=int, default=15, help="passes per size (100k: a third)")
    p.add_argument(
        "--sizes",
        type=pending_sizes,
        default=list(SIZES),
        help=f"pending sets to time, comma-separated (default {','.join(SIZES)})",
    )
    return parse_with_small(p, {"repeats": 3, "sizes": ["1k"]})


def pending_sizes(text: str) -> list[str]:
    labels = [label.strip() for label in text.split(",") if label.strip()]
    unknown = [label for label in labels if label not in SIZES]
    if unknown or not labels:
        raise argparse.ArgumentTypeError(f"sizes are among {', '.join(SIZES)}, not {text!r}")
    return labels


def make_nodes() -> tuple[Node, ...]:
    return tuple(
        Node(f"{product.lower()}-{i}", 8, product, 64_000, 1024 * GIB)
        for product, count in PRODUCTS.items()
        for i in range(count)
    )


def make_teams(rng: random.Random) -> tuple[Team, ...]:
    weights = [rng.choice([1.0, 2.0, 3.0]) for _ in range(TEAMS)]
    total = sum(weights)
    teams = []
    for i, weight in enumerate(weights):
        nominal = {p: round(n * 8 * weight / total) for p, n in PRODUCTS.items()}
        teams.append(
            Team(f"team{i:02d}", Quota(nominal), Quota(dict(nominal)), weight, max_priority=3)
        )
    return tuple(teams)


def make_pending(
    rng: random.Random, count: int, teams: tuple[Team, ...], prefix: str
) -> tuple[PendingJob, ...]:
    jobs = []
    for i in range(count):
        product = rng.choices([None, "A100", "V100"], [0.2, 0.56, 0.24])[0]
        duration = duration_s(rng)
        jobs.append(
            PendingJob(
                f"{prefix}{i}",
                rng.choice(teams).name,
                gang_for(job_gpus(rng), product),
                submitted_at=-rng.uniform(0, 86_400),
                priority=rng.choice([0, 0, 0, 1, 2, 3]),
                estimated_runtime_s=runtime_estimate_s(rng, duration),
            )
        )
    return tuple(jobs)


def as_running(rng: random.Random, job: PendingJob, admission: Admission) -> RunningJob:
    started = -rng.uniform(0, 6 * 3600)
    return RunningJob(
        job.id,
        job.team,
        job.gang,
        admission.nodes,
        started,
        job.priority,
        admission.gpu_product,
        job.estimated_runtime_s,
        last_checkpoint_at=rng.uniform(started, 0.0),
    )


def settle(
    rng: random.Random,
    cluster: ClusterSnapshot,
    pending: tuple[PendingJob, ...],
) -> tuple[tuple[RunningJob, ...], tuple[PendingJob, ...]]:
    """Passes over `pending` as the service would run them (admissions start, victims
    leave) until one preempts almost nothing: the state a busy scheduler keeps."""
    running = list(cluster.running)
    for _ in range(SETTLE_PASSES):
        result = schedule(
            ClusterSnapshot(cluster.nodes, cluster.teams, tuple(running), pending), 0.0
        )
        victims = {p.victim_id for p in result.preemptions}
        by_id = {j.id: j for j in pending}
        running = [j for j in running if j.id not in victims]
        running += [as_running(rng, by_id[a.job_id], a) for a in result.admissions]
        started = {a.job_id for a in result.admissions}
        pending = tuple(j for j in pending if j.id not in started)
        if len(result.preemptions) <= len(cluster.teams) // 10:
            break
    return tuple(running), pending


def busy_cluster(rng: random.Random, count: int) -> ClusterSnapshot:
    """`count` pending jobs on a cluster the scheduler itself filled and keeps busy, just
    after 15% of its running jobs ended."""
    nodes, teams = make_nodes(), make_teams(rng)
    capacity = sum(n.gpus for n in nodes)
    offered: list[PendingJob] = []
    while sum(j.gang.learners * j.gang.gpus for j in offered) < FILL_GPUS * capacity:
        offered.extend(make_pending(rng, 100, teams, f"fill{len(offered)}-"))
    empty = ClusterSnapshot(nodes, teams)
    running, _ = settle(rng, empty, tuple(offered))
    pending = make_pending(rng, count, teams, "p")
    running, pending = settle(rng, ClusterSnapshot(nodes, teams, running), pending)
    running = tuple(j for j in running if rng.random() >= ENDED_SHARE)
    # the jobs that started are replaced by as many new ones (these came in since)
    pending += make_pending(rng, count - len(pending), teams, "q")
    return ClusterSnapshot(nodes, teams, running, pending)


def floor_pass(jobs: tuple[PendingJob, ...]) -> tuple[Waiting, ...]:
    ordered = sorted(jobs, key=lambda j: (-j.priority, j.submitted_at, j.id))
    return tuple(
        Waiting(j.id, i, WaitCause.CAPACITY, "waiting", None) for i, j in enumerate(ordered, 1)
    )


def timed(call: Callable[[], object], repeats: int) -> list[float]:
    call()  # warm-up: first-touch allocations
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        times.append((time.perf_counter() - start) * 1000.0)
    return times


def main() -> None:
    args = parse_args()
    figures: dict[str, object] = {"bench": "scheduler"}
    for label in args.sizes:
        count = SIZES[label]
        rng = random.Random(args.seed)
        cluster = busy_cluster(rng, count)
        capacity = sum(n.gpus for n in cluster.nodes)
        used = sum(j.gang.learners * j.gang.gpus for j in cluster.running)
        progress(
            f"{label}: {len(cluster.nodes)} nodes, {capacity} GPUs, {len(cluster.teams)} teams, "
            f"{len(cluster.running)} running jobs holding {used} GPUs ({used / capacity:.0%}), "
            f"{len(cluster.pending)} pending"
        )
        repeats = max(3, args.repeats // 3) if count >= 100_000 else args.repeats
        passes = timed(lambda c=cluster: schedule(c, 0.0), repeats)  # type: ignore[misc]
        floors = timed(lambda p=cluster.pending: floor_pass(p), repeats)  # type: ignore[misc]
        result = schedule(cluster, 0.0)
        figures[f"pending_{label}"] = len(cluster.pending)
        figures[f"running_jobs_{label}"] = len(cluster.running)
        figures[f"gpus_in_use_share_{label}"] = rounded(used / capacity)
        figures[f"pass_ms_median_{label}"] = rounded(median(passes), 2)
        figures[f"pass_ms_p90_{label}"] = rounded(percentile(passes, 90), 2)
        figures[f"floor_ms_median_{label}"] = rounded(median(floors), 2)
        figures[f"admitted_{label}"] = len(result.admissions)
        figures[f"preempted_{label}"] = len(result.preemptions)
        figures[f"waiting_{label}"] = len(result.waiting)
        figures[f"refused_{label}"] = len(result.refusals)
        progress(
            f"{label}: pass median {median(passes):.1f} ms (p90 {percentile(passes, 90):.1f}), "
            f"floor {median(floors):.1f} ms; admitted {len(result.admissions)}, preempted "
            f"{len(result.preemptions)}, waiting {len(result.waiting)}, refused "
            f"{len(result.refusals)}"
        )
    if "10k" in args.sizes:
        figures["ratio_pass_to_floor_10k"] = rounded(
            float(figures["pass_ms_median_10k"]) / float(figures["floor_ms_median_10k"]),
            2,  # type: ignore[arg-type]
        )
    if {"10k", "100k"} <= set(args.sizes):
        figures["growth_10k_to_100k"] = rounded(
            float(figures["pass_ms_median_100k"]) / float(figures["pass_ms_median_10k"]),
            2,  # type: ignore[arg-type]
        )
    figures["target_pass_ms_median_10k"] = TARGET_PASS_MS_10K
    figures["machine_cores"] = os.cpu_count()
    figures["load_average_before"] = rounded(os.getloadavg()[0], 2)
    print(json.dumps(figures), flush=True)


if __name__ == "__main__":
    main()
