"""/healthz, Prometheus /metrics and /v2/cluster."""

from __future__ import annotations

import os
import socket

from fastapi import APIRouter, Response
from prometheus_client import CONTENT_TYPE_LATEST, Counter, Gauge, generate_latest
from sqlalchemy import func, select, text

from api.access import Allowed
from api.deps import SessionDep, StateDep
from storage.job_states import ACTIVE_STATES, JobState, LearnerState
from storage.models import Job, Learner

router = APIRouter(tags=["system"])

JOBS_SUBMITTED = Counter("dlaas_jobs_submitted", "Jobs accepted by this API process")
JOBS_BY_STATE = Gauge("dlaas_jobs", "Jobs in the database by state", ["state"])


@router.get("/healthz")
async def healthz(state: StateDep) -> dict[str, str]:
    async with state.sessions() as session:
        await session.execute(text("SELECT 1"))
    await state.redis.ping()
    return {"status": "ok"}


@router.get("/metrics", include_in_schema=False)
async def prometheus_metrics(session: SessionDep) -> Response:
    rows = await session.execute(
        select(Job.state, func.count()).where(Job.deleted_at.is_(None)).group_by(Job.state)
    )
    counts = {state: count for state, count in rows.all()}
    for job_state in JobState:
        JOBS_BY_STATE.labels(job_state.value).set(counts.get(job_state.value, 0))
    return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)


def _memory_bytes() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return 0


def _number(value: object) -> float:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0.0


# The learners counted as holding their share of a node.
HOLDING = (LearnerState.PENDING, LearnerState.DOWNLOADING, LearnerState.RUNNING)


@router.get("/v2/cluster", tags=["cluster"])
async def cluster(state: StateDep, session: SessionDep, user: Allowed) -> dict[str, object]:
    """The cluster's nodes, each with its capacity and what active learners hold of it."""
    active = [s.value for s in ACTIVE_STATES]
    held = await session.execute(
        select(Job.manifest)
        .select_from(Learner)
        .join(Job, Job.id == Learner.job_id)
        .where(Job.state.in_(active), Learner.state.in_(HOLDING))
    )
    manifests = held.scalars().all()
    backend = state.settings.cluster_backend
    nodes = []
    if backend == "local":
        nodes.append(
            {
                "name": socket.gethostname(),
                "cpus": os.cpu_count() or 1,
                "memory_bytes": _memory_bytes(),
                "gpus": 0,
                "learners": len(manifests),
                "cpus_used": round(sum(_number(m.get("cpus", 1)) for m in manifests), 3),
                "memory_bytes_used": int(sum(_number(m.get("memory")) for m in manifests)),
                "gpus_used": int(sum(_number(m.get("gpus")) for m in manifests)),
            }
        )
    return {"backend": backend, "nodes": nodes, "active_learners": len(manifests)}
