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
import math
from collections.abc import Iterable, Sequence

Ask = tuple[str, int, float | None, float | None]  # pool, amount, runtime, known start


def estimated_starts(
    free: dict[str, int],
    releases: Iterable[tuple[str, float, int]],
    now: float,
    asks: Sequence[Ask],
) -> list[float | None]:
    """The estimated start of each ask, in queue order.

    `free`: each pool's free amount now; `releases`: (pool, end, amount) of the jobs
    holding room (end math.inf when unknown); `asks`: (pool, amount, estimated runtime,
    the earliest it can start, such as a reservation's or when quota lets it; math.inf:
    never known) of each waiting job. Pools are
    independent, so each is played forward on its own."""
    ends: dict[str, list[tuple[float, int]]] = {}
    for pool, end, amount in releases:
        if not math.isinf(end):
            ends.setdefault(pool, []).append((max(end, now), amount))
    in_pool: dict[str, list[int]] = {}
    for i, ask in enumerate(asks):
        in_pool.setdefault(ask[0], []).append(i)
    starts: list[float | None] = [None] * len(asks)
    heappop, heappush = heapq.heappop, heapq.heappush
    for pool, indices in in_pool.items():
        heap = ends.get(pool, [])
        heapq.heapify(heap)
        have = free.get(pool, 0)
        clock = now
        for i in indices:
            _, amount, runtime, known = asks[i]
            while have < amount and heap:
                end, freed = heappop(heap)
                have += freed
                if end > clock:
                    clock = end
            if have < amount:
                break  # room that never frees: no later job of the pool gets an estimate
            if known is not None and math.isinf(known):
                continue  # held back by what has no estimated end: no estimate, no room taken
            have -= amount
            if known is not None and known > clock:
                clock = known
            if runtime is not None:
                heappush(heap, (clock + runtime, amount))
            starts[i] = clock
    return starts
