"""Builders of scheduler snapshots with defaults, so each scenario states only what matters."""

from __future__ import annotations

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

NOW = 10_000.0


def gpu_nodes(count: int, gpus: int = 8, product: str = "A100", prefix: str = "") -> list[Node]:
    prefix = prefix or product.lower()
    return [
        Node(f"{prefix}-{i}", gpus, product, millicpus=gpus * 8000, memory=gpus * 64 * GIB)
        for i in range(count)
    ]


def gang(gpus: int = 1, learners: int = 1, product: str | None = "A100") -> Gang:
    return Gang(
        learners, gpus, product, millicpus=gpus * 4000 or 1000, memory=(gpus or 1) * 16 * GIB
    )


def team(
    name: str,
    gpus: int = 8,
    borrow: int = 0,
    product: str = "A100",
    weight: float = 1.0,
    jobs: int | None = None,
    max_priority: int = 10,
) -> Team:
    return Team(
        name,
        Quota({product: gpus}, jobs=jobs),
        Quota({product: borrow}, jobs=0 if jobs is not None else None),
        weight=weight,
        max_priority=max_priority,
    )


def pending(
    job_id: str,
    team_name: str,
    gpus: int = 1,
    learners: int = 1,
    priority: int = 0,
    submitted: float = 0.0,
    runtime: float | None = 3600.0,
    product: str | None = "A100",
) -> PendingJob:
    return PendingJob(
        job_id, team_name, gang(gpus, learners, product), submitted, priority, runtime
    )


def running(
    job_id: str,
    team_name: str,
    nodes: list[str] | str,
    gpus: int = 1,
    priority: int = 0,
    started: float = NOW - 600,
    runtime: float | None = 3600.0,
    checkpoint: float | None = None,
    product: str = "A100",
    stopping: bool = False,
) -> RunningJob:
    names = (nodes,) if isinstance(nodes, str) else tuple(nodes)
    return RunningJob(
        job_id,
        team_name,
        gang(gpus, len(names), product),
        names,
        started,
        priority,
        product,
        runtime,
        checkpoint,
        stopping,
    )


def snapshot(
    nodes: list[Node],
    teams: list[Team],
    running_jobs: list[RunningJob] | None = None,
    pending_jobs: list[PendingJob] | None = None,
) -> ClusterSnapshot:
    return ClusterSnapshot(
        tuple(nodes), tuple(teams), tuple(running_jobs or ()), tuple(pending_jobs or ())
    )


def play_passes(
    nodes: list[Node],
    teams: list[Team],
    waves: list[list[PendingJob]],
    passes: int,
) -> list[SchedulePass]:
    """Passes one a minute from NOW, applied as the service applies them: admitted jobs
    run, a victim stops in the pass after its preemption and is queued again as it was
    (no job ends of itself); `waves[i]` joins the queue before pass i."""
    queued: list[PendingJob] = []
    known: dict[str, PendingJob] = {}
    running: list[RunningJob] = []
    stopping: set[str] = set()
    results = []
    for step in range(passes):
        arriving = waves[step] if step < len(waves) else []
        known.update({job.id: job for job in arriving})
        queued += arriving
        queued += [known[job.id] for job in running if job.id in stopping]
        running = [job for job in running if job.id not in stopping]
        result = schedule(
            ClusterSnapshot(tuple(nodes), tuple(teams), tuple(running), tuple(queued)),
            NOW + 60 * step,
        )
        results.append(result)
        stopping = {p.victim_id for p in result.preemptions}
        for admission in result.admissions:
            job = known[admission.job_id]
            running.append(
                RunningJob(
                    job.id,
                    job.team,
                    job.gang,
                    admission.nodes,
                    NOW + 60 * step,
                    job.priority,
                    admission.gpu_product,
                )
            )
        admitted = {a.job_id for a in result.admissions}
        queued = [job for job in queued if job.id not in admitted]
    return results
