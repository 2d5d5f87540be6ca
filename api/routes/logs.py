"""/v2/jobs/{id}/logs and /metrics: live from Redis streams, stored copies once finished."""

from __future__ import annotations

from fastapi import APIRouter, Query, Request
from fastapi.responses import PlainTextResponse, StreamingResponse

from api.deps import CurrentUser, StateDep
from api.schemas import MetricList
from api.services import jobs as service
from api.services import logs as logs_service

router = APIRouter(prefix="/v2/jobs", tags=["logs"])


@router.get("/{job_id}/logs", response_model=None)
async def job_logs(
    job_id: str,
    request: Request,
    state: StateDep,
    user: CurrentUser,
    follow: bool = Query(False, description="stream new lines as Server-Sent Events"),
    learner: int | None = Query(None, ge=1, description="only this learner's lines"),
) -> StreamingResponse | PlainTextResponse:
    async with state.sessions() as session:
        await service.owned_job(session, user, job_id)
    if not follow:
        text = await logs_service.all_lines_text(state, job_id, learner)
        return PlainTextResponse(text)
    after = request.headers.get("last-event-id") or "0-0"
    return StreamingResponse(
        logs_service.follow_events(state, job_id, after, learner),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


@router.get("/{job_id}/metrics", response_model=MetricList)
async def job_metrics(job_id: str, state: StateDep, user: CurrentUser) -> MetricList:
    async with state.sessions() as session:
        await service.owned_job(session, user, job_id)
    return MetricList(metrics=await logs_service.metric_points(state, job_id))
