"""Where a gang goes: best-fit placement over nodes grouped by free GPUs.

Nodes sit in buckets keyed by (GPU product, free GPUs), so finding the fullest node that
still holds a learner looks at a handful of buckets instead of every node, and a full
cluster answers "no room" at once. Best fit (the node with the fewest free GPUs that holds
the learner) keeps whole nodes free for the large gangs that need them. A gang is placed
learner by learner and taken back whole if any learner finds no node: all or nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from lifecycle_manager.scheduler.model import Gang, Node


@dataclass(frozen=True, slots=True)
class Placement:
    nodes: tuple[str, ...]  # learner i (1-based) on nodes[i - 1]
    gpu_product: str | None


class FreeCapacity:
    """The free room of every node, changed in place as a pass places and holds gangs."""

    def __init__(self, nodes: Iterable[Node]) -> None:
        self.names: list[str] = []
        self.product: list[str | None] = []
        self.gpus: list[int] = []
        self.millicpus: list[int] = []
        self.memory: list[int] = []
        self.index: dict[str, int] = {}
        self._buckets: dict[str | None, list[dict[int, None]]] = {}
        for node in nodes:
            i = len(self.names)
            self.index[node.name] = i
            self.names.append(node.name)
            self.product.append(node.gpu_product)
            self.gpus.append(node.gpus)
            self.millicpus.append(node.millicpus)
            self.memory.append(node.memory)
            self._bucket(node.gpu_product, node.gpus)[i] = None
        # GPU-less nodes first, so learners without GPUs leave GPU nodes' CPUs to GPU jobs
        self._cpu_order = sorted(self._buckets, key=lambda p: (p is not None, p or ""))

    def products(self) -> list[str | None]:
        return list(self._cpu_order)

    def _bucket(self, product: str | None, free_gpus: int) -> dict[int, None]:
        levels = self._buckets.setdefault(product, [])
        while len(levels) <= free_gpus:
            levels.append({})
        return levels[free_gpus]

    def take(self, i: int, gpus: int, millicpus: int, memory: int) -> None:
        if gpus:
            del self._buckets[self.product[i]][self.gpus[i]][i]
            self.gpus[i] -= gpus
            self._buckets[self.product[i]][self.gpus[i]][i] = None
        self.millicpus[i] -= millicpus
        self.memory[i] -= memory

    def give(self, i: int, gpus: int, millicpus: int, memory: int) -> None:
        self.take(i, -gpus, -millicpus, -memory)

    def room_for(self, product: str | None, gpus: int) -> int:
        """How many learners of `gpus` GPUs the free GPUs of `product` could hold at most
        (CPUs and memory not counted): a cheap bound before trying a placement."""
        if gpus == 0:
            return 1 << 62
        levels = self._buckets.get(product, ())
        return sum(len(levels[free]) * (free // gpus) for free in range(gpus, len(levels)))

    def _best_fit(self, product: str | None, gpus: int, millicpus: int, memory: int) -> int:
        cpus, mems = self.millicpus, self.memory
        if gpus:
            candidates: list[dict[int, None]] = self._buckets.get(product, [])[gpus:]
        else:
            depth = max(len(levels) for levels in self._buckets.values())
            candidates = [
                levels[free]
                for free in range(depth)
                for levels in (self._buckets[p] for p in self._cpu_order)
                if free < len(levels)
            ]
        for bucket in candidates:
            for i in bucket:
                if cpus[i] >= millicpus and mems[i] >= memory:
                    return i
        return -1

    def place(self, gang: Gang, product: str | None) -> Placement | None:
        """Place every learner of `gang` on nodes of `product` (any node if it needs no
        GPUs) and take their room, or take nothing and return None."""
        if self.room_for(product, gang.gpus) < gang.learners:
            return None
        taken: list[int] = []
        for _ in range(gang.learners):
            i = self._best_fit(product, gang.gpus, gang.millicpus, gang.memory)
            if i < 0:
                for j in taken:
                    self.give(j, gang.gpus, gang.millicpus, gang.memory)
                return None
            self.take(i, gang.gpus, gang.millicpus, gang.memory)
            taken.append(i)
        return Placement(tuple(self.names[i] for i in taken), product if gang.gpus else None)


def candidate_products(gang: Gang, products: Sequence[str | None]) -> list[str | None]:
    """The GPU products a gang may be placed on, among those the cluster has."""
    if gang.gpus == 0:
        return [None]
    if gang.gpu_product is not None:
        return [gang.gpu_product] if gang.gpu_product in products else []
    return [p for p in products if p is not None]


def place_gang(gang: Gang, free: Sequence[Node]) -> Placement | None:
    """Best-fit placement of a whole gang on nodes whose amounts are their free room.

    A gang without a GPU product goes on the first product (by name) that holds it whole.
    """
    capacity = FreeCapacity(free)
    for product in sorted(candidate_products(gang, capacity.products()), key=str):
        placement = capacity.place(gang, product)
        if placement is not None:
            return placement
    return None
