"""Gangs: all learners placed at once or none, best fit, and refusal of what never fits."""

from lifecycle_manager.scheduler import (
    GIB,
    Gang,
    Node,
    PendingJob,
    WaitCause,
    place_gang,
    schedule,
    validate_fits,
)
from tests.unit.scheduler.factories import NOW, gang, gpu_nodes, pending, running, snapshot, team


def test_a_gang_starts_whole_or_not_at_all() -> None:
    cluster = snapshot(
        gpu_nodes(2),
        [team("a", 32)],
        [running("r", "a", "a100-0", gpus=4)],
        [pending("gang", "a", gpus=8, learners=2)],
    )
    result = schedule(cluster, NOW)
    assert not result.admissions
    assert result.waiting[0].cause is WaitCause.CAPACITY


def test_each_learner_of_a_gang_gets_its_own_room() -> None:
    cluster = snapshot(gpu_nodes(2), [team("a", 16)], pending_jobs=[pending("g", "a", 4, 4)])
    (admission,) = schedule(cluster, NOW).admissions
    assert sorted(admission.nodes) == ["a100-0", "a100-0", "a100-1", "a100-1"]


def test_best_fit_fills_the_fullest_node_and_keeps_whole_nodes_free() -> None:
    free = [
        Node("empty", 8, "A100", 64_000, 512 * GIB),
        Node("half", 4, "A100", 32_000, 256 * GIB),
        Node("nearly-full", 2, "A100", 16_000, 128 * GIB),
    ]
    assert place_gang(gang(2), free).nodes == ("nearly-full",)
    assert place_gang(gang(2, learners=3), free).nodes == ("nearly-full", "half", "half")
    assert place_gang(gang(8), free).nodes == ("empty",)
    assert place_gang(gang(8, learners=2), free) is None


def test_a_gang_that_names_no_product_runs_on_one_product() -> None:
    nodes = gpu_nodes(1, 4, "T4") + gpu_nodes(1, 4, "A100")
    placement = place_gang(gang(4, learners=2, product=None), nodes)
    assert placement is None
    placement = place_gang(gang(2, learners=2, product=None), nodes)
    assert placement is not None and placement.gpu_product in ("A100", "T4")
    assert len(set(placement.nodes)) == 1


def test_cpu_only_learners_prefer_nodes_without_gpus() -> None:
    nodes = [*gpu_nodes(1), Node("cpu-0", 0, None, 32_000, 128 * GIB)]
    assert place_gang(Gang(1, 0, None, 2000, GIB), nodes).nodes == ("cpu-0",)


def refusal_field(job_gang: Gang) -> tuple[str, str] | None:
    nodes = gpu_nodes(4) + gpu_nodes(2, 4, "T4")
    refusal = validate_fits(PendingJob("big", "a", job_gang, 0.0), nodes)
    return None if refusal is None else (refusal.field, refusal.reason)


def test_a_learner_larger_than_any_node_is_refused_naming_the_field() -> None:
    assert refusal_field(Gang(1, 16, "A100", 1000, GIB)) == (
        "gpus",
        "needs 16 GPUs (A100) per learner; the largest node has 8 GPUs",
    )
    assert refusal_field(Gang(1, 8, "T4", 1000, GIB))[0] == "gpus"
    assert refusal_field(Gang(1, 2, "H100", 1000, GIB)) == (
        "gpus",
        "needs 2 GPUs (H100) per learner; no node has H100 GPUs (the cluster has: A100, T4)",
    )
    assert refusal_field(Gang(1, 8, "A100", 100_000, GIB)) == (
        "cpus",
        "needs 100 CPUs per learner; the largest node with 8 GPUs (A100) has 64 CPUs",
    )
    assert refusal_field(Gang(1, 1, None, 1000, 1024 * GIB))[0] == "memory"
    assert refusal_field(Gang(5, 8, "A100", 1000, GIB)) == (
        "learners",
        "needs 5 learners of 8 GPUs (A100), 1 CPU, 1 GiB memory; the whole cluster, empty, holds 4",
    )
    assert refusal_field(Gang(4, 8, "A100", 1000, GIB)) is None


def test_a_pass_refuses_what_never_fits_and_queues_the_rest() -> None:
    cluster = snapshot(
        gpu_nodes(1), [team("a", 8)], pending_jobs=[pending("huge", "a", 16), pending("ok", "a")]
    )
    result = schedule(cluster, NOW)
    assert [(r.job_id, r.field) for r in result.refusals] == [("huge", "gpus")]
    assert [a.job_id for a in result.admissions] == ["ok"]
