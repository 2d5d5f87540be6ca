"""The autoscaler's step after each scheduling pass: read the running elastic jobs and
what they were measured doing, let `scheduler.elastic_pass` size them, record the resizes.

Under the scheduler's lease and behind its fence, as a pass is (`scheduling_pass`), on what
the pass just committed (its admissions hold room):

    running elastic jobs (database) + their throughput now (the chief's metric points of
    the current attempt, Redis) + the sizes they were measured at before (`resizing` events)
        -> throughput_curve -> elastic_pass -> resizing.record for each resize

A job's size counts as measured once its chief reported steps over at least
`MEASURE_SPAN_S` (its throughput now is that over the last `MEASURE_WINDOW_S`); until
then, and for `autoscale_interval_s` after it last started or resized, it keeps its size.
What a resize costs is measured too: from its `resizing` event
to the new attempt running.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from lifecycle_manager.glue import resizing, scheduler_lease
from lifecycle_manager.glue.cluster_snapshot import snapshot
from lifecycle_manager.glue.context import Context
from lifecycle_manager.glue.scheduling import load_jobs
from lifecycle_manager.scheduler import SchedulePass, Waiting
from lifecycle_manager.scheduler.elastic_pass import ElasticRunning, elastic_pass
from lifecycle_manager.scheduler.throughput_curve import (
    batch_at,
    measured_throughput,
    throughput_curve,
)
from storage import jobs as repo
from storage import scheduler_fence, streams
from storage.cluster_nodes import NodeCapacity
from storage.job_states import JobState
from storage.models import Job, JobEvent
from storage.performance_model import configured_network
from storage.team_quotas import team_quotas

MEASURE_SPAN_S = 5.0
MEASURE_WINDOW_S = 60.0  # the throughput now: over the chief's points of the last minute
_METRIC_BATCHES = 2000
_STATE_EVENT = "state"


def is_elastic(manifest: Mapping[str, Any]) -> bool:
    elastic = manifest.get("elastic")
    if not isinstance(elastic, Mapping):
        return False
    low = int(elastic.get("min_learners") or 1)
    high = elastic.get("max_learners")
    return high is not None and int(high) > low


async def _chief_points(ctx: Context, job_id: str, attempt: int) -> list[tuple[float, int]]:
    """(time, step) of the chief's metric points of `attempt` in the last
    `MEASURE_WINDOW_S`, oldest first."""
    since = ctx.clock().timestamp() - MEASURE_WINDOW_S
    batches = await streams.aread_metrics_since(ctx.redis, job_id, since, _METRIC_BATCHES)
    points = [
        (record.time, record.step)
        for _, batch in batches
        if batch.learner == 1 and batch.attempt == attempt
        for record in batch.records()
        if record.step is not None
    ]
    return sorted(points)


def _resize_cost(resized: JobEvent | None, running: JobEvent | None) -> float | None:
    if resized is None or running is None or running.id < resized.id:
        return None
    return (running.time - resized.time).total_seconds()


async def _elastic_running(
    ctx: Context, session: AsyncSession, job_ids: Sequence[str]
) -> tuple[list[ElasticRunning], list[float]]:
    """The running elastic jobs among `job_ids` as the autoscaler sizes them, and the
    resize costs measured on them."""
    query = select(Job).where(Job.id.in_(job_ids), Job.state == JobState.RUNNING.value)
    jobs = [job for job in (await session.execute(query)).scalars() if is_elastic(job.manifest)]
    events = await repo.latest_events(
        session, [job.id for job in jobs], (resizing.RESIZING_EVENT, _STATE_EVENT)
    )
    settings = ctx.settings
    network = configured_network(settings)
    found, costs = [], []
    for job in jobs:
        batch = batch_at(job.manifest, job.learners)
        if batch is None:
            continue
        points = await _chief_points(ctx, job.id, job.attempt)
        now = measured_throughput(points, batch, MEASURE_SPAN_S)
        measured: dict[tuple[int, int], float] = {}
        resized = events.get((job.id, resizing.RESIZING_EVENT))
        if resized is not None and resized.detail.get("measured_samples_s"):
            before = (
                int(resized.detail["from_learners"]),
                int(resized.detail["from_global_batch"]),
            )
            measured[before] = float(resized.detail["measured_samples_s"])
        if now is not None:
            measured[(job.learners, batch)] = now
        choices = throughput_curve(job.manifest, network, measured)
        current = next((c for c in choices if c.learners == job.learners), None)
        if current is None:
            continue
        started = events.get((job.id, _STATE_EVENT))
        settled = started is None or ctx.age(started.time) >= settings.autoscale_interval_s
        cost = _resize_cost(resized, started)
        if cost is not None:
            costs.append(cost)
        samples = (job.manifest.get("performance") or {}).get("samples")
        done = (points[-1][1] * batch) if points else 0
        found.append(
            ElasticRunning(
                job.id,
                choices,
                current,
                max(float(samples) - done, 0.0) if samples else math.inf,
                movable=settled and now is not None,
            )
        )
    return found, costs


async def _any_running_elastic(ctx: Context) -> bool:
    async with ctx.sessions() as session:
        query = select(Job.manifest).where(
            Job.state == JobState.RUNNING.value, Job.deleted_at.is_(None)
        )
        return any(is_elastic(manifest) for manifest in (await session.execute(query)).scalars())


async def autoscale_pass(ctx: Context, waiting: Sequence[Waiting]) -> list[tuple[str, int]]:
    """Size the running elastic jobs, given the jobs the pass left `waiting`; the jobs
    now RESCALING, each with the attempt whose learners are to stop."""
    if not await _any_running_elastic(ctx):
        return []  # nothing to size: the scheduler's lease is not taken again for nothing
    nodes = await ctx.backend.nodes()
    resized = await scheduler_lease.run_fenced(
        ctx.redis, "autoscaling", lambda token: _resize(ctx, nodes, waiting, token)
    )
    return resized or []


async def _resize(
    ctx: Context, nodes: Sequence[NodeCapacity], waiting: Sequence[Waiting], token: int
) -> list[tuple[str, int]]:
    """`autoscale_pass` as the lease holder of `token` (raises StaleToken)."""
    recorded = []
    async with ctx.sessions.begin() as session:
        await scheduler_fence.claim(session, token)
        loaded = await load_jobs(session)
        holding = [record.id for record in loaded.records if record.holding]
        elastic, costs = await _elastic_running(ctx, session, holding)
        if not elastic:
            return []
        quotas = await team_quotas(session)
        cost = sorted(costs)[len(costs) // 2] if costs else ctx.settings.resize_cost_s
        after = SchedulePass(admissions=(), preemptions=(), waiting=tuple(waiting))
        for resize in elastic_pass(snapshot(nodes, quotas, loaded.records), after, elastic, cost):
            attempt = await resizing.record(session, resize)
            if attempt is not None:
                recorded.append((resize.job_id, attempt))
    return recorded
