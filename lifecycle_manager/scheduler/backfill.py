"""EASY backfill: the first job that finds no room reserves the earliest room to come, and
jobs behind it may start only where they cannot delay that reservation.

The reservation's start is when running jobs, ending at start + estimated runtime, will
have freed enough room for the head's whole gang (a job already past its estimate counts
as ending now; one without an estimate, never). Of the room free now, the part the head
will need at that start is held back. A job behind the head may then start
- in room nobody holds, whatever its runtime (the head gets its room anyway), or
- in held room too if it is estimated to end before the reservation's start.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import NamedTuple

from lifecycle_manager.scheduler.model import Gang
from lifecycle_manager.scheduler.placement import FreeCapacity, Placement

Room = tuple[int, int, int]  # GPUs, millicpus, memory


class Release(NamedTuple):
    """Room a job holding it gives back when it ends: `room` on each of `nodes` (indices,
    one per learner)."""

    end: float  # math.inf when unknown
    nodes: tuple[int, ...]
    room: Room


def learners_fitting(gang: Gang, gpus: int, millicpus: int, memory: int) -> int:
    counts = [1 << 30]
    if gang.gpus:
        counts.append(gpus // gang.gpus)
    if gang.millicpus:
        counts.append(millicpus // gang.millicpus)
    if gang.memory:
        counts.append(memory // gang.memory)
    return min(counts)


class Reservation:
    """The head's claim: its estimated start and the room held for it, lent only to jobs
    that end before the start."""

    def __init__(
        self,
        job_id: str,
        priority: int,
        start: float | None,
        holds: dict[int, Room],
        gang: Gang | None = None,
        product: str | None = None,
        expects: dict[int, Room] | None = None,
    ):
        self.job_id = job_id
        self.priority = priority
        self.start = start
        self.holds = holds
        self.gang = gang
        self.product = product
        # per node, the room the head counts on running jobs giving back there: what they
        # free goes to the head first, so a job behind it cannot plan on it
        self.expects = expects or {}
        self.behind_reason: str | None = None  # what the jobs behind it are told

    def ends_in_time(self, end: float | None) -> bool:
        return self.start is not None and end is not None and end <= self.start

    def place_short(self, free: FreeCapacity, gang: Gang, product: str | None) -> Placement | None:
        """Place a job that ends before the start, lending it held room; the room it takes
        from the holds is back by the start, so the holds shrink by it for this pass only."""
        for node, (g, c, m) in self.holds.items():
            free.give(node, g, c, m)
        placement = free.place(gang, product)
        for node, (g, c, m) in list(self.holds.items()):
            kept = (
                min(g, free.gpus[node]),
                min(c, free.millicpus[node]),
                min(m, free.memory[node]),
            )
            free.take(node, *kept)
            self.holds[node] = kept
        return placement


def reserve(
    job_id: str,
    priority: int,
    gang: Gang,
    product: str | None,
    free: FreeCapacity,
    releases: Iterable[Release],
    now: float,
) -> Reservation:
    """Reserve the earliest room for the whole gang and hold the part of it free now."""
    nodes = [i for i in range(len(free.names)) if not gang.gpus or free.product[i] == product]
    room = {i: [free.gpus[i], free.millicpus[i], free.memory[i]] for i in nodes}
    fitting = {i: learners_fitting(gang, *room[i]) for i in nodes}
    total = sum(fitting.values())
    start: float | None = now
    ordered = sorted(releases)
    k = 0
    while total < gang.learners and k < len(ordered):
        moment = ordered[k].end
        while k < len(ordered) and ordered[k].end == moment:
            release = ordered[k]
            k += 1
            for node in release.nodes:
                node_room = room.get(node)
                if node_room is None:
                    continue  # not a node the gang may use
                for d in range(3):
                    node_room[d] += release.room[d]
                total -= fitting[node]
                fitting[node] = learners_fitting(gang, *node_room)
                total += fitting[node]
        start = None if math.isinf(moment) else max(moment, now)
    if total < gang.learners:
        return Reservation(job_id, priority, None, {})
    holds: dict[int, Room] = {}
    expects: dict[int, Room] = {}
    left = gang.learners
    # best fit at the start: the nodes with the least room that hold learners
    for i in sorted((i for i in nodes if fitting[i]), key=lambda i: (room[i][0], room[i][1])):
        count = min(fitting[i], left)
        left -= count
        freed = [room[i][d] - now_free for d, now_free in enumerate(_free_now(free, i))]
        needs = (count * gang.gpus, count * gang.millicpus, count * gang.memory)
        held = tuple(min(max(needs[d] - freed[d], 0), _free_now(free, i)[d]) for d in range(3))
        if any(held):
            holds[i] = (held[0], held[1], held[2])
        expected = (needs[0] - held[0], needs[1] - held[1], needs[2] - held[2])
        if any(expected):
            expects[i] = expected
        if not left:
            break
    for i, (g, c, m) in holds.items():
        free.take(i, g, c, m)
    return Reservation(job_id, priority, start, holds, gang, product, expects)


def _free_now(free: FreeCapacity, i: int) -> Room:
    return (free.gpus[i], free.millicpus[i], free.memory[i])
