"""Refuse at submission a job whose learner could run on no node of the cluster, or whose
learners could never all run at once on the whole cluster.

The nodes are those the lifecycle manager last published (`storage.cluster_nodes`); while it
has published none, every job is accepted as before. A learner must fit one node whole: the
GPUs it asks for first, then its CPUs on a node with those GPUs, then its memory on a node
with both; the refusal names the first manifest field that no node can give, and what the
largest node that could offers.
"""

from __future__ import annotations

from collections.abc import Sequence
from decimal import Decimal

from api.errors import Invalid
from api.manifest import Manifest
from api.state import ApiState
from storage.cluster_nodes import NodeCapacity, anodes
from storage.counted import counted

LOCAL_GPUS_HINT = "; the local node's GPUs are set on the lifecycle manager with DLAAS_LOCAL_GPUS"


def _gpus(node: NodeCapacity) -> str:
    kind = [node.gpu_product, "pretend" if node.pretend_gpus else None]
    named = [part for part in dict.fromkeys(kind) if part]
    named_text = f" ({', '.join(named)})" if named and node.gpus else ""
    return f"{counted(node.gpus, 'GPU')}{named_text}"


def _cpus(millicpus: int) -> str:
    return f"{Decimal(millicpus) / 1000:g}"


def _cpu_count(millicpus: int | str) -> str:
    count = millicpus if isinstance(millicpus, str) else _cpus(millicpus)
    return f"{count} CPU{'' if count == '1' else 's'}"


def memory_size(size: int, *, at_most: bool = False) -> str:
    """`size` bytes as a manifest writes them; `at_most`: rounded down to whole MiB."""
    for unit, scale in (("Gi", 2**30), ("Mi", 2**20)):
        if size >= scale and size % scale == 0:
            return f"{size // scale}{unit}"
    if at_most and size >= 2**20:
        return f"{size // 2**20}Mi"
    return str(size)


def refusal(
    nodes: Sequence[NodeCapacity], gpus: int, millicpus: int, memory: int
) -> tuple[str, str] | None:
    """The manifest field no node can give one learner, and why with the fix; None if a node
    can hold it (or none is known)."""
    if not nodes:
        return None
    with_gpus = [node for node in nodes if node.gpus >= gpus]
    if not with_gpus:
        top = max(nodes, key=lambda node: node.gpus)
        return "gpus", (
            f"{counted(gpus, 'GPU')} per learner is more than any node has: the largest node "
            f"has {_gpus(top)}; ask for at most {top.gpus} per learner"
        )
    having = [counted(gpus, "GPU")] if gpus else []
    with_cpus = [node for node in with_gpus if node.millicpus >= millicpus]
    if not with_cpus:
        most = _cpus(max(node.millicpus for node in with_gpus))
        return "cpus", _more_than_any(_cpu_count(millicpus), having, _cpu_count(most), most)
    if not any(node.memory >= memory for node in with_cpus):
        most = memory_size(max(node.memory for node in with_cpus), at_most=True)
        having.append(_cpu_count(millicpus))
        return "memory", _more_than_any(
            f"{memory_size(memory)} of memory", having, f"{most} of memory", most
        )
    return None


def learners_per_node(node: NodeCapacity, gpus: int, millicpus: int, memory: int) -> int:
    """How many learners of this size one empty node holds."""
    room = [node.gpus // gpus if gpus else None, node.millicpus // millicpus if millicpus else None]
    room.append(node.memory // memory if memory else None)
    known = [count for count in room if count is not None]
    return min(known) if known else 0


def most_learners(
    nodes: Sequence[NodeCapacity], gpus: int, millicpus: int, memory: int
) -> tuple[int, str | None]:
    """How many learners of this size the whole cluster holds at once, and the GPU product
    of the nodes that hold them: a gang with GPUs runs on nodes of one product."""
    held: dict[str | None, int] = {}
    for node in nodes:
        product = node.gpu_product if gpus else None
        held[product] = held.get(product, 0) + learners_per_node(node, gpus, millicpus, memory)
    product, most = max(held.items(), key=lambda item: item[1], default=(None, 0))
    return most, product


def gang_refusal(
    nodes: Sequence[NodeCapacity], learners: int, gpus: int, millicpus: int, memory: int
) -> str | None:
    """Why a gang of `learners` can never start on these nodes, all empty, with the fix;
    None if it can (or no node is known)."""
    if not nodes:
        return None
    most, product = most_learners(nodes, gpus, millicpus, memory)
    if learners <= most:
        return None
    each = [counted(gpus, "GPU")] if gpus else []
    each.append(_cpu_count(millicpus))
    on = f"{product} " if product else ""
    return (
        f"{counted(learners, 'learner')} of {' and '.join(each)} each must run at once, and "
        f"the cluster's {counted(len(nodes), 'node')} hold at most {most} such learners even "
        f"with nothing else running ({on}nodes counted whole); ask for at most {most} "
        "learners, or smaller learners"
    )


def _more_than_any(asked: str, having: Sequence[str], has: str, most: str) -> str:
    among = f" with {' and '.join(having)}" if having else ""
    return (
        f"{asked} per learner is more than any node{among} has: the largest node{among} has "
        f"{has}; ask for at most {most} per learner"
    )


async def check_fits(state: ApiState, manifest: Manifest) -> None:
    """Raise `Invalid` naming the field when no published node can hold one learner."""
    nodes = await anodes(state.redis)
    if not nodes:
        return
    millicpus = round(manifest.cpus * 1000)
    found = refusal(nodes, manifest.gpus, millicpus, manifest.memory)
    if found is None:
        learners = manifest.elastic.min_learners if manifest.elastic else manifest.learners
        too_many = gang_refusal(nodes, learners, manifest.gpus, millicpus, manifest.memory)
        if too_many is not None:
            field = "elastic.min_learners" if manifest.elastic else "learners"
            raise Invalid(too_many, code="larger_than_cluster", field=field)
        return
    field, detail = found
    if field == "gpus" and state.settings.cluster_backend == "local":
        detail += LOCAL_GPUS_HINT
    raise Invalid(detail, code="larger_than_any_node", field=field)
