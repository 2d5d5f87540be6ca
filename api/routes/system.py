"""/healthz, Prometheus /metrics and /v2/cluster."""

from __future__ import annotations

from fastapi import APIRouter, Response
from prometheus_client import CONTENT_TYPE_LATEST, Counter, Gauge, generate_latest
from sqlalchemy import func, select, text

from api.access import Allowed
from api.deps import RedisDep, SessionDep, StateDep
from api.services.cluster import cluster_view
from storage.job_states import JobState
from storage.models import Job

router = APIRouter(tags=["system"])

JOBS_SUBMITTED = Counter("dlaas_jobs_submitted", "Jobs accepted by this API process")
JOBS_BY_STATE = Gauge("dlaas_jobs", "Jobs in the database by state", ["state"])

# The lifecycle manager's tasks wait in Celery's default queue. Kombu's Redis transport keeps
# a queue as one list per priority step (`celery`, then `celery\x06\x163`, `...6`, `...9`);
# a task a worker has taken is in none of them. The chart's worker autoscaler scales on
# this gauge (through prometheus-adapter: helm/dlaas/values.yaml), so its name is a contract.
CELERY_QUEUE = "celery"
_PRIORITY_LISTS = [CELERY_QUEUE, *(f"{CELERY_QUEUE}\x06\x16{step}" for step in (3, 6, 9))]
CELERY_QUEUE_LENGTH = Gauge(
    "dlaas_celery_queue_length",
    "Lifecycle-manager tasks waiting in the Celery queue for a worker",
    ["queue"],
)


@router.get("/healthz")
async def healthz(state: StateDep) -> dict[str, str]:
    async with state.sessions() as session:
        await session.execute(text("SELECT 1"))
    await state.redis.ping()
    return {"status": "ok"}


@router.get("/metrics", include_in_schema=False)
async def prometheus_metrics(session: SessionDep, redis: RedisDep) -> Response:
    # Counted at scrape time, so every API process (and pod) reports the same figures; an
    # unreachable Redis fails the scrape (a 503) rather than leave a stale queue length.
    async with redis.pipeline(transaction=False) as pipe:
        for name in _PRIORITY_LISTS:
            pipe.llen(name)
        lengths = await pipe.execute()
    CELERY_QUEUE_LENGTH.labels(CELERY_QUEUE).set(sum(lengths))
    rows = await session.execute(
        select(Job.state, func.count()).where(Job.deleted_at.is_(None)).group_by(Job.state)
    )
    counts = {state: count for state, count in rows.all()}
    for job_state in JobState:
        JOBS_BY_STATE.labels(job_state.value).set(counts.get(job_state.value, 0))
    return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)


@router.get("/v2/cluster", tags=["cluster"])
async def cluster(state: StateDep, session: SessionDep, user: Allowed) -> dict[str, object]:
    """The cluster's nodes, each with its capacity (GPUs with their product, and whether
    they are pretend) and what active learners hold of it."""
    return await cluster_view(state, session)
