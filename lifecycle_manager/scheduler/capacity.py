"""Whether a job could ever run on these nodes, and if not, which field to change.

One learner must fit on one node (GPUs of the right product, CPUs, memory), and the whole
gang must fit the cluster when it is empty. Nodes are counted by type, so the check costs
the number of node types, not of nodes, and a pass checks each distinct gang once.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import NamedTuple

from lifecycle_manager.scheduler.amounts import describe_gpus, describe_memory, describe_millicpus
from lifecycle_manager.scheduler.decisions import Refusal
from lifecycle_manager.scheduler.model import Gang, Node, PendingJob


class NodeType(NamedTuple):
    gpu_product: str | None
    gpus: int
    millicpus: int
    memory: int


class FitCheck:
    """Refusals of gangs on one set of nodes, each distinct gang worked out once."""

    def __init__(self, nodes: Iterable[Node]) -> None:
        self._types = Counter(NodeType(n.gpu_product, n.gpus, n.millicpus, n.memory) for n in nodes)
        self._known: dict[Gang, tuple[str, str] | None] = {}

    def refusal(self, job: PendingJob) -> Refusal | None:
        found = self.why_not(job.gang)
        return None if found is None else Refusal(job.id, found[0], found[1])

    def why_not(self, gang: Gang) -> tuple[str, str] | None:
        """None if the gang fits the empty cluster, else the field to change and why."""
        if gang not in self._known:
            self._known[gang] = self._work_out(gang)
        return self._known[gang]

    def _work_out(self, gang: Gang) -> tuple[str, str] | None:
        typed = list(self._types)
        if gang.gpus:
            typed = [t for t in typed if t.gpu_product is not None]
            if gang.gpu_product is not None:
                typed = [t for t in typed if t.gpu_product == gang.gpu_product]
            if not typed:
                products = sorted({t.gpu_product for t in self._types if t.gpu_product is not None})
                return "gpus", (
                    f"needs {describe_gpus(gang.gpus, gang.gpu_product)} per learner; no node "
                    f"has {gang.gpu_product or 'any'} GPUs (the cluster has: "
                    f"{', '.join(products) or 'none'})"
                )
        needs = {"gpus": gang.gpus, "cpus": gang.millicpus, "memory": gang.memory}
        where = "the largest node"
        for field, attribute in (("gpus", "gpus"), ("cpus", "millicpus"), ("memory", "memory")):
            fitting = [t for t in typed if getattr(t, attribute) >= needs[field]]
            if not fitting:
                largest = max(getattr(t, attribute) for t in typed)
                return field, (
                    f"needs {_describe(field, needs[field], gang.gpu_product)} per learner; "
                    f"{where} has {_describe(field, largest, None)}"
                )
            typed = fitting
            if field == "gpus" and gang.gpus:
                where = f"the largest node with {describe_gpus(gang.gpus, gang.gpu_product)}"
        per_product: Counter[str | None] = Counter()
        for t in typed:
            per_product[t.gpu_product] += self._types[t] * _learners_per_node(gang, t)
        most = max(per_product.values())
        if most < gang.learners:
            return "learners", (
                f"needs {gang.learners} learners of {describe_gpus(gang.gpus, gang.gpu_product)}, "
                f"{describe_millicpus(gang.millicpus)}, {describe_memory(gang.memory)}; "
                f"the whole cluster, empty, holds {most}"
            )
        return None


def _describe(field: str, amount: int, product: str | None) -> str:
    if field == "gpus":
        return describe_gpus(amount, product)
    if field == "cpus":
        return describe_millicpus(amount)
    return describe_memory(amount)


def _learners_per_node(gang: Gang, node_type: NodeType) -> int:
    _, gpus, millicpus, memory = node_type
    counts = [millicpus // gang.millicpus if gang.millicpus else 1 << 30]
    if gang.gpus:
        counts.append(gpus // gang.gpus)
    if gang.memory:
        counts.append(memory // gang.memory)
    return min(counts)


def validate_fits(job: PendingJob, nodes: Iterable[Node]) -> Refusal | None:
    """None if the job's gang could run on these nodes once they are empty; otherwise the
    refusal, naming the field to change (gpus, cpus, memory or learners)."""
    return FitCheck(nodes).refusal(job)
