"""One scheduling pass, under the scheduler's lease and behind its fence:

    backend.nodes()
    scheduler_lease.held            one pass at a time; a dead holder's lease lapses in 3 s
      publish the nodes
      one transaction:
        scheduler_fence.claim       refused (StaleToken) once a newer holder has written
        scheduling.load_jobs + team_quotas -> scheduler.schedule
        scheduling.record_pass      admissions, reasons of the jobs that wait
        preemption.record_stop      each victim asked to stop
      publish the queue

Every write the pass decides sits in that one transaction, so a holder whose lease lapsed
(paused, or slow) applies none of them once another holder's pass has written. What the
caller does after it (deploys, SIGTERM to the victims) follows from what was committed.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

from lifecycle_manager.backends.base import BackendUnavailable
from lifecycle_manager.glue import preemption, scheduler_lease
from lifecycle_manager.glue.cluster_snapshot import snapshot
from lifecycle_manager.glue.context import Context
from lifecycle_manager.glue.scheduling import load_jobs, record_pass
from lifecycle_manager.scheduler import SchedulePass, schedule
from storage import cluster_nodes, queue_view, scheduler_fence
from storage.cluster_nodes import NodeCapacity
from storage.team_quotas import team_quotas

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RecordedPass:
    decided: SchedulePass
    # the victims this pass asked to stop, each with the attempt whose learners are to go
    stopping: dict[str, int]


async def fenced_pass(ctx: Context, nodes: Sequence[NodeCapacity], token: int) -> RecordedPass:
    """Decide and record a pass as the lease holder of `token` (raises StaleToken)."""
    await cluster_nodes.apublish_nodes(ctx.redis, nodes)
    async with ctx.sessions.begin() as session:
        await scheduler_fence.claim(session, token)
        loaded = await load_jobs(session)
        quotas = await team_quotas(session)
        now = ctx.clock()
        decided = schedule(snapshot(nodes, quotas, loaded.records), now.timestamp())
        fail_after_s = ctx.settings.unschedulable_fail_after_s
        view = await record_pass(session, decided, loaded, now, fail_after_s)
        stopping = {}
        for chosen in decided.preemptions:
            attempt = await preemption.record_stop(
                session, chosen.victim_id, chosen.for_job_id, chosen.reason
            )
            if attempt is not None:
                stopping[chosen.victim_id] = attempt
    await queue_view.apublish_queue(ctx.redis, view)
    return RecordedPass(decided, stopping)


async def run_pass(ctx: Context) -> RecordedPass | None:
    """One scheduling pass, recorded; None when none ran (the cluster could not say its
    nodes, another pass held the lease too long, or this one lost it)."""
    try:
        nodes = await ctx.backend.nodes()
    except BackendUnavailable as error:
        log.warning("scheduling: the cluster is unavailable: %s", error)
        return None
    recorded = await scheduler_lease.run_fenced(
        ctx.redis, "scheduling", lambda token: fenced_pass(ctx, nodes, token)
    )
    if recorded is None:
        return None
    decided = recorded.decided
    if decided.admissions or decided.preemptions:
        log.info(
            "scheduling: admitted %s; preempting %s",
            [a.job_id for a in decided.admissions],
            [p.victim_id for p in decided.preemptions],
        )
    return recorded
