"""Gang admission: does the cluster have room for every pod of a gang at once?

Pure. The room on each node is its allocatable CPU, memory and GPUs (`nvidia.com/gpu`) less
what the pods bound to it request; pods still waiting for a node take their room first.
The gang is then placed first-fit, largest pod first, on the nodes its node selector and
tolerations allow. Like the scheduler, requests count, not use.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from kubernetes.utils import parse_quantity

from lifecycle_manager.backends.kubernetes.manifests import GPU_RESOURCE

FINISHED_PHASES = ("Succeeded", "Failed")
_HARD_EFFECTS = ("NoSchedule", "NoExecute")


@dataclass(frozen=True)
class Amount:
    millicpu: int = 0
    memory: int = 0
    gpus: int = 0

    def __add__(self, other: Amount) -> Amount:
        return Amount(
            self.millicpu + other.millicpu, self.memory + other.memory, self.gpus + other.gpus
        )

    def __sub__(self, other: Amount) -> Amount:
        return Amount(
            self.millicpu - other.millicpu, self.memory - other.memory, self.gpus - other.gpus
        )

    def covers(self, need: Amount) -> bool:
        return (
            self.millicpu >= need.millicpu and self.memory >= need.memory and self.gpus >= need.gpus
        )

    def describe(self) -> str:
        gpus = f"{self.gpus} GPU{'s' if self.gpus != 1 else ''}"
        cpus = f"{Decimal(self.millicpu) / 1000:g} CPUs"
        return f"{gpus}, {cpus}, {self.memory / 2**30:.1f} GiB memory"


@dataclass
class NodeRoom:
    name: str
    free: Amount
    labels: Mapping[str, str] = field(default_factory=dict)
    taints: Sequence[Mapping[str, Any]] = ()


def _amount(quantities: Mapping[str, Any] | None) -> Amount:
    quantities = quantities or {}

    def value(key: str, scale: int = 1) -> int:
        raw = quantities.get(key)
        return int(parse_quantity(str(raw)) * scale) if raw is not None else 0

    return Amount(value("cpu", 1000), value("memory"), value(GPU_RESOURCE))


def _container_request(container: Mapping[str, Any]) -> Amount:
    resources = container.get("resources") or {}
    # As the API server does: a container with limits but no requests requests its limits.
    limits = resources.get("limits") or {}
    requests = {**limits, **(resources.get("requests") or {})}
    return _amount(requests)


def pod_request(pod: Mapping[str, Any]) -> Amount:
    """What a pod requests: its containers and sidecars, or its largest init step if more."""
    spec = pod.get("spec") or {}
    total = Amount()
    for container in spec.get("containers") or []:
        total += _container_request(container)
    largest_init = Amount()
    for init in spec.get("initContainers") or []:
        need = _container_request(init)
        if init.get("restartPolicy") == "Always":
            total += need  # a sidecar runs beside the containers
        else:
            largest_init = Amount(
                max(largest_init.millicpu, need.millicpu),
                max(largest_init.memory, need.memory),
                max(largest_init.gpus, need.gpus),
            )
    return Amount(
        max(total.millicpu, largest_init.millicpu),
        max(total.memory, largest_init.memory),
        max(total.gpus, largest_init.gpus),
    )


def allocatable(node: Mapping[str, Any]) -> Amount:
    """What a node offers pods in all: its allocatable CPU, memory and GPUs."""
    return _amount((node.get("status") or {}).get("allocatable"))


def schedulable(node: Mapping[str, Any]) -> bool:
    """Whether new pods may go to the node: not cordoned, and Ready (or saying nothing)."""
    if (node.get("spec") or {}).get("unschedulable"):
        return False
    conditions = (node.get("status") or {}).get("conditions") or []
    ready = [c for c in conditions if c.get("type") == "Ready"]
    return not ready or ready[0].get("status") == "True"


def node_rooms(
    nodes: Iterable[Mapping[str, Any]], pods: Iterable[Mapping[str, Any]]
) -> tuple[list[NodeRoom], list[Amount]]:
    """The free room of each schedulable node, and the requests of pods not yet on a node."""
    rooms = {}
    for node in nodes:
        if not schedulable(node):
            continue
        meta = node.get("metadata") or {}
        rooms[meta.get("name", "")] = NodeRoom(
            name=meta.get("name", ""),
            free=allocatable(node),
            labels=meta.get("labels") or {},
            taints=(node.get("spec") or {}).get("taints") or [],
        )
    waiting: list[Amount] = []
    for pod in pods:
        if (pod.get("status") or {}).get("phase") in FINISHED_PHASES:
            continue
        need = pod_request(pod)
        node_name = (pod.get("spec") or {}).get("nodeName")
        if node_name in rooms:
            rooms[node_name].free -= need
        elif not node_name:
            waiting.append(need)
    return list(rooms.values()), waiting


def _tolerates(tolerations: Sequence[Mapping[str, Any]], taint: Mapping[str, Any]) -> bool:
    for toleration in tolerations:
        effect = toleration.get("effect")
        if effect and effect != taint.get("effect"):
            continue
        key = toleration.get("key")
        if toleration.get("operator", "Equal") == "Exists":
            if not key or key == taint.get("key"):
                return True
        elif key == taint.get("key") and toleration.get("value", "") == taint.get("value", ""):
            return True
    return False


def eligible(room: NodeRoom, pod: Mapping[str, Any]) -> bool:
    spec = pod.get("spec") or {}
    selector = spec.get("nodeSelector") or {}
    if any(room.labels.get(key) != value for key, value in selector.items()):
        return False
    tolerations = spec.get("tolerations") or []
    return all(
        _tolerates(tolerations, taint)
        for taint in room.taints
        if taint.get("effect") in _HARD_EFFECTS
    )


def _place(rooms: list[NodeRoom], need: Amount, allowed: Sequence[NodeRoom]) -> bool:
    for room in allowed:
        if room.free.covers(need):
            room.free -= need
            return True
    return False


def admit(
    gang: Sequence[Mapping[str, Any]],
    nodes: Iterable[Mapping[str, Any]],
    pods: Iterable[Mapping[str, Any]],
) -> str | None:
    """None if every pod of `gang` fits at once, else the reason it does not."""
    rooms, waiting = node_rooms(nodes, pods)
    for need in sorted(waiting, key=_size, reverse=True):
        _place(rooms, need, rooms)
    eligible_rooms = [room for room in rooms if gang and eligible(room, gang[0])]
    free = sum((room.free for room in eligible_rooms), Amount())
    needs = [(pod_request(pod), pod) for pod in gang]
    placed = 0
    for need, pod in sorted(needs, key=lambda item: _size(item[0]), reverse=True):
        allowed = [room for room in rooms if eligible(room, pod)]
        if _place(rooms, need, allowed):
            placed += 1
    if placed == len(gang):
        return None
    largest = max((need for need, _ in needs), key=_size)
    noun = "learner" if len(gang) == 1 else "learners"
    return (
        f"the cluster cannot hold all {len(gang)} {noun} at once (room for {placed}): "
        f"the largest needs {largest.describe()}; "
        f"{_nodes(len(eligible_rooms))} {free.describe()} free"
    )


def _nodes(count: int) -> str:
    return "1 eligible node has" if count == 1 else f"{count} eligible nodes have"


def _size(amount: Amount) -> tuple[int, int, int]:
    return (amount.gpus, amount.millicpu, amount.memory)
