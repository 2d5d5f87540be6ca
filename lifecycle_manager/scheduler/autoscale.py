"""Which elastic jobs start, grow or shrink: the optimizer's plan, less what does not pay.

A resize stops the job at a checkpoint and restarts it with the new learner count and
batch, which costs `resize_cost_s` of no progress (measured by the service). A growth is
made only when the job would still end sooner, the cost included (a job whose samples left
are unknown, `math.inf`, always would, if the new size is faster); a shrink always is,
since the GPUs it gives back are what the plan starts or grows other jobs with. A job the
plan leaves waiting waits; a running job always keeps a size.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

from lifecycle_manager.scheduler.elastic_optimizer import Choice, ElasticJob, optimize
from storage.counted import counted


@dataclass(frozen=True, slots=True)
class Sizing:
    """An elastic job as the autoscaler sees it: its choices, the one it runs with (None
    while it waits, and then `job.running` is false), and the samples it has left."""

    job: ElasticJob
    current: Choice | None
    samples_left: float


class Resize(NamedTuple):
    """A start (`old` None) or a resize of a running job, and why."""

    job_id: str
    old: Choice | None
    new: Choice
    reason: str


def autoscale(sizings: Sequence[Sizing], gpus: int, resize_cost_s: float) -> list[Resize]:
    """The starts and resizes for `sizings` (running jobs, then waiting ones in queue
    order) on `gpus`. Nothing when the running jobs' smallest sizes do not fit."""
    plan = optimize([s.job for s in sizings], gpus)
    if plan is None:
        return []
    resizes = []
    for sizing in sizings:
        new = plan.choices[sizing.job.id]
        old = sizing.current
        if new is None or new == old:
            continue
        if old is None:
            resizes.append(Resize(sizing.job.id, None, new, _start_reason(new)))
            continue
        saved = sizing.samples_left * (1 / old.throughput - 1 / new.throughput)
        if new.learners > old.learners and not saved > resize_cost_s:
            continue  # the gain would not repay the stop and restart (nan: no gain at all)
        before = sizing.samples_left / old.throughput
        after = resize_cost_s + sizing.samples_left / new.throughput
        resizes.append(Resize(sizing.job.id, old, new, _resize_reason(old, new, before, after)))
    return resizes


def _start_reason(new: Choice) -> str:
    return (
        f"starts with {counted(new.learners, 'learner')} and a global batch of {new.global_batch} "
        f"({new.throughput:,.0f} samples/s expected)"
    )


def _resize_reason(old: Choice, new: Choice, before: float, after: float) -> str:
    if new.learners > old.learners:
        grows = (
            f"grows from {old.learners} to {new.learners} learners (global batch "
            f"{old.global_batch} -> {new.global_batch}): "
        )
        if math.isinf(before):
            return grows + (
                f"{new.throughput:,.0f} rather than {old.throughput:,.0f} samples/s expected, "
                "and no end in sight that a restart would not repay"
            )
        return grows + (
            f"expected to end in {after:,.0f} s rather than {before:,.0f} s, the restart included"
        )
    return shrink_reason(old, new, "other jobs start or grow")


def shrink_reason(old: Choice, new: Choice, so_that: str) -> str:
    return (
        f"shrinks from {old.learners} to {counted(new.learners, 'learner')} (global batch "
        f"{old.global_batch} -> {new.global_batch}) so that {so_that}"
    )
