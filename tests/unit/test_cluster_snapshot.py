"""The scheduler's view built from the platform's records, as the service builds it."""

from __future__ import annotations

from lifecycle_manager.glue.cluster_snapshot import (
    NOT_LIMITED_GPUS,
    JobRecord,
    Placement,
    snapshot,
)
from lifecycle_manager.scheduler import WaitCause, schedule
from storage.cluster_nodes import NodeCapacity
from storage.team_quotas import TeamQuota

GIB = 1 << 30
NODE = NodeCapacity("n1", gpus=2, gpu_product="T4", millicpus=8000, memory=64 * GIB)


def unset(team: str, **fields: object) -> TeamQuota:
    values: dict[str, object] = dict.fromkeys(
        (
            "gpus",
            "millicpus",
            "memory",
            "jobs",
            "borrow_gpus",
            "borrow_millicpus",
            "borrow_memory",
            "borrow_jobs",
        )
    )
    values.update(fields)
    return TeamQuota(team=team, **values)  # type: ignore[arg-type]


def job(
    job_id: str, team: str = "vision", at: float = 0.0, holding: bool = False, **manifest: object
) -> JobRecord:
    return JobRecord(id=job_id, team=team, manifest=manifest, submitted_at=at, holding=holding)


def test_a_team_whose_quota_was_never_set_may_use_the_whole_cluster() -> None:
    cluster = snapshot([NODE], [unset("vision")], [job("a", gpus=2)])
    [team] = cluster.teams
    assert dict(team.nominal.gpus) == {"T4": NOT_LIMITED_GPUS} and team.nominal.millicpus is None
    decided = schedule(cluster, 10.0)
    assert [a.job_id for a in decided.admissions] == ["a"]
    assert decided.admissions[0].nodes == ("n1",)


def test_the_manifest_gives_the_gang_priority_and_estimated_runtime() -> None:
    cluster = snapshot(
        [NODE],
        [unset("vision")],
        [job("a", learners=2, gpus=1, cpus=1.5, memory=2 * GIB, priority=3, max_runtime=600)],
    )
    [pending] = cluster.pending
    gang = pending.gang
    assert (gang.learners, gang.gpus, gang.millicpus, gang.memory) == (2, 1, 1500, 2 * GIB)
    assert (pending.priority, pending.estimated_runtime_s) == (3, 600.0)


def test_a_job_holding_resources_takes_them_where_it_was_placed() -> None:
    placed = JobRecord(
        id="r",
        team="vision",
        manifest={"gpus": 2},
        submitted_at=0.0,
        holding=True,
        placement=Placement(nodes=("n1",), gpu_product="T4"),
        admitted_at=5.0,
    )
    cluster = snapshot([NODE], [unset("vision")], [placed, job("w", at=1.0, gpus=1)])
    [running] = cluster.running
    assert (running.nodes, running.started_at, running.gpu_product) == (("n1",), 5.0, "T4")
    decided = schedule(cluster, 10.0)
    assert decided.admissions == ()
    [waiting] = decided.waiting
    assert waiting.job_id == "w" and waiting.cause is WaitCause.CAPACITY


def test_a_job_admitted_before_placements_were_recorded_counts_on_the_first_node() -> None:
    legacy = job("old", holding=True, learners=2, cpus=4)
    [running] = snapshot([NODE], [unset("vision")], [legacy]).running
    assert running.nodes == ("n1", "n1")


def test_a_job_asked_to_stop_is_never_chosen_again() -> None:
    stopping = JobRecord(
        id="v", team="vision", manifest={}, submitted_at=0.0, holding=True, preempting=True
    )
    [running] = snapshot([NODE], [unset("vision")], [stopping]).running
    assert running.stopping


def test_queued_jobs_are_weighed_in_the_order_they_came() -> None:
    cluster = snapshot(
        [NODE], [unset("vision")], [job("b", at=2.0), job("a", at=1.0), job("c", at=1.0)]
    )
    assert [p.id for p in cluster.pending] == ["a", "c", "b"]


def test_a_set_quota_divides_the_cluster() -> None:
    teams = [unset("vision", gpus={"T4": 1}, borrow_gpus={"T4": 0}), unset("speech")]
    cluster = snapshot([NODE], teams, [job("a", gpus=1), job("b", at=1.0, gpus=1)])
    decided = schedule(cluster, 10.0)
    assert [a.job_id for a in decided.admissions] == ["a"]
    [waiting] = decided.waiting
    assert waiting.job_id == "b" and waiting.cause is WaitCause.TEAM_QUOTA
