"""Properties of any pass: no node holds more than it has, no team uses more than its
nominal quota plus borrowing limit, the teams together borrow only what others left idle,
and every admitted gang is placed whole."""

from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from lifecycle_manager.scheduler import (
    GIB,
    ClusterSnapshot,
    Gang,
    Node,
    PendingJob,
    Quota,
    RunningJob,
    Team,
    schedule,
)
from lifecycle_manager.scheduler.quota import QuotaLedger

PRODUCTS = ("A100", "T4")


@st.composite
def clusters(draw: st.DrawFn) -> tuple[tuple[Node, ...], tuple[Team, ...]]:
    nodes = [
        Node(
            f"n{i}",
            draw(st.sampled_from([4, 8])),
            draw(st.sampled_from(PRODUCTS)),
            32_000,
            256 * GIB,
        )
        for i in range(draw(st.integers(1, 5)))
    ]
    teams = []
    for name in ("a", "b", "c")[: draw(st.integers(2, 3))]:
        nominal = Quota(
            {p: draw(st.integers(0, 16)) for p in PRODUCTS},
            millicpus=draw(st.sampled_from([None, 64_000])),
            jobs=draw(st.sampled_from([None, 2, 4])),
        )
        borrowing = Quota(
            {p: draw(st.integers(0, 12)) for p in PRODUCTS},
            jobs=draw(st.sampled_from([None, 0, 2])),
        )
        teams.append(
            Team(name, nominal, borrowing, draw(st.sampled_from([1.0, 2.0])), max_priority=5)
        )
    return tuple(nodes), tuple(teams)


@st.composite
def arrivals(draw: st.DrawFn, teams: tuple[Team, ...], start: int, now: float) -> list[PendingJob]:
    jobs = []
    for i in range(draw(st.integers(0, 8))):
        gpus = draw(st.integers(0, 8))
        gang = Gang(
            draw(st.integers(1, 3)),
            gpus,
            draw(st.sampled_from((*PRODUCTS, None))) if gpus else None,
            draw(st.sampled_from([1000, 8000])),
            draw(st.sampled_from([GIB, 32 * GIB])),
        )
        jobs.append(
            PendingJob(
                f"j{start + i}",
                draw(st.sampled_from([t.name for t in teams])),
                gang,
                now,
                draw(st.integers(0, 7)),
                draw(st.sampled_from([None, 100.0, 5000.0])),
            )
        )
    return jobs


def assert_within_limits(cluster: ClusterSnapshot, running: list[RunningJob]) -> None:
    held: Counter[tuple[str, str]] = Counter()
    for job in running:
        assert len(job.nodes) == job.gang.learners
        for name in job.nodes:
            held[(name, "gpus")] += job.gang.gpus
            held[(name, "cpus")] += job.gang.millicpus
            held[(name, "memory")] += job.gang.memory
    for node in cluster.nodes:
        assert held[(node.name, "gpus")] <= node.gpus
        assert held[(node.name, "cpus")] <= node.millicpus
        assert held[(node.name, "memory")] <= node.memory
    for job in running:
        if job.gang.gpus:
            product = {n.name: n.gpu_product for n in cluster.nodes}
            assert {product[name] for name in job.nodes} == {job.gpu_product}
    assert QuotaLedger(cluster.teams, running).violations() == []


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_passes_never_overfill_a_node_or_exceed_a_quota(data: st.DataObject) -> None:
    nodes, teams = data.draw(clusters())
    running: list[RunningJob] = []
    queued: list[PendingJob] = []
    now = 0.0
    for step in range(4):
        now += 60
        ended = data.draw(st.sets(st.sampled_from([j.id for j in running]))) if running else set()
        running = [j for j in running if j.id not in ended]
        queued += data.draw(arrivals(teams, step * 10, now))
        cluster = ClusterSnapshot(nodes, teams, tuple(running), tuple(queued))
        result = schedule(cluster, now)
        victims = {p.victim_id for p in result.preemptions}
        admitted = {a.job_id for a in result.admissions}
        by_id = {j.id: j for j in queued}
        started = [
            RunningJob(a.job_id, a.team, by_id[a.job_id].gang, a.nodes, now, 0, a.gpu_product)
            for a in result.admissions
        ]
        # a team is borrowing with what it runs and what this pass starts for it
        ledger = QuotaLedger(teams, [*running, *started])
        for preemption in result.preemptions:
            victim = next(j for j in running if j.id == preemption.victim_id)
            if victim.team != by_id[preemption.for_job_id].team:
                key = f"gpus:{victim.gpu_product}" if victim.gang.gpus else "cpus"
                assert ledger.accounts[victim.team].borrowing(key), preemption
        running = [j for j in running if j.id not in victims]
        for admission in result.admissions:
            job = by_id[admission.job_id]
            running.append(
                RunningJob(
                    job.id,
                    job.team,
                    job.gang,
                    admission.nodes,
                    now,
                    job.priority,
                    admission.gpu_product,
                )
            )
        queued = [j for j in queued if j.id not in admitted]
        refused = {r.job_id for r in result.refusals}
        assert {w.job_id for w in result.waiting} | admitted | refused == set(by_id)
        queued = [j for j in queued if j.id not in refused]
        assert_within_limits(cluster, running)
