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
from collections.abc import Iterable


class StartEstimator:
    """Asked for each waiting job in queue order, answers its estimated start."""

    def __init__(
        self, free: dict[str, int], releases: Iterable[tuple[str, float, int]], now: float
    ) -> None:
        """`free`: each pool's free amount now; `releases`: (pool, end, amount) of the jobs
        holding room (end math.inf when unknown)."""
        self._now = now
        self._ends: dict[str, list[tuple[float, int]]] = {}
        for pool, end, amount in releases:
            if not math.isinf(end):
                self._ends.setdefault(pool, []).append((max(end, now), amount))
        for heap in self._ends.values():
            heapq.heapify(heap)
        self._available = dict(free)
        self._clock: dict[str, float | None] = {}

    def start(
        self, pool: str, amount: int, runtime_s: float | None, known_start: float | None = None
    ) -> float | None:
        """The next job's start; `known_start` is one worked out already (a reservation's)."""
        start = self._clock.get(pool, self._now)
        have = self._available.get(pool, 0)
        heap = self._ends.get(pool)
        while start is not None and have < amount:
            if not heap:
                start = None
                break
            end, freed = heapq.heappop(heap)
            have += freed
            start = max(start, end)
        if start is not None:
            have -= amount
            if known_start is not None:
                start = max(start, known_start)
            if runtime_s is not None:
                heapq.heappush(self._ends.setdefault(pool, []), (start + runtime_s, amount))
        self._available[pool] = have
        self._clock[pool] = start
        return start
