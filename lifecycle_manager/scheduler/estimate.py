"""Estimated start times for waiting jobs, for `dlaas queue`.

Each pool of room (the GPUs of one product, or the CPUs for jobs without GPUs) is played
forward as one quantity: waiting jobs start in queue order, each as soon as jobs ending
(running ones at their estimated end, waiting ones once started at start + estimate) have
freed its amount. Where the nodes fragment, or quota holds a job back, it starts later;
where backfill lets it go ahead, earlier. A job after one whose start cannot be estimated
(room held by jobs without an estimated runtime) gets no estimate either.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class PoolDemand:
    pool: str
    amount: int
    runtime_s: float | None
    known_start: float | None = None  # a start already worked out (the reservation's)


def estimate_starts(
    demands: Sequence[PoolDemand],
    free: dict[str, int],
    releases: Iterable[tuple[str, float, int]],
    now: float,
) -> list[float | None]:
    """For each demand in queue order, its estimated start (None if unknown).

    `free` is each pool's free amount now; `releases` are (pool, end, amount) of running
    jobs (end math.inf when unknown).
    """
    ends: dict[str, list[tuple[float, int]]] = {}
    for pool, end, amount in releases:
        if end != float("inf"):
            ends.setdefault(pool, []).append((max(end, now), amount))
    for heap in ends.values():
        heapq.heapify(heap)
    available = dict(free)
    clock: dict[str, float | None] = {}
    starts: list[float | None] = []
    for demand in demands:
        pool = demand.pool
        heap = ends.setdefault(pool, [])
        start = clock.get(pool, now)
        have = available.get(pool, 0)
        while start is not None and have < demand.amount:
            if not heap:
                start = None
                break
            end, amount = heapq.heappop(heap)
            have += amount
            start = max(start, end)
        if start is not None:
            have -= demand.amount
            if demand.known_start is not None:
                start = max(start, demand.known_start)
            if demand.runtime_s is not None:
                heapq.heappush(heap, (start + demand.runtime_s, demand.amount))
        available[pool] = have
        clock[pool] = start
        starts.append(start)
    return starts
