"""/v2/jobs/{id}/logs and /metrics: the stored log and metrics, then the live tail."""

from __future__ import annotations

from typing import Annotated

import orjson
from fastapi import APIRouter, Header, Query, Request, Response
from fastapi.responses import StreamingResponse

from api.access import JobAccess
from api.deps import JobId, StateDep
from api.errors import DlaasError, NotFound
from api.pagination import (
    DEFAULT_LIMIT,
    MAX_LIMIT,
    Cursor,
    MetricPosition,
    metric_cursor,
    metric_position,
)
from api.query_numbers import QueryDigits
from api.schemas import MetricList
from api.services import logs as logs_service
from api.services.log_join import POSITION, Position, decode_position

router = APIRouter(prefix="/v2/jobs", tags=["logs"])


def _learners(count: int, learner: int | None) -> list[int]:
    if learner is None:
        return list(range(1, count + 1))
    if not 1 <= learner <= count:
        raise NotFound(
            f"learner {learner} does not exist: this job has learners 1..{count}",
            field="learner",
        )
    return [learner]


def _wants_events(request: Request) -> bool:
    """Whether the client asks for events rather than text: the CLI does, to label each line
    with its learner. A browser (or curl) accepting anything gets the text."""
    accept = request.headers.get("accept", "")
    return "text/event-stream" in accept and "text/plain" not in accept and "*/*" not in accept


@router.get(
    "/{job_id}/logs",
    response_class=StreamingResponse,
    responses={
        200: {
            "description": "the log as text, several learners' lines in time order; with "
            "follow=true, or when the request accepts only text/event-stream, as Server-Sent "
            "Events that name each line's learner",
            "content": {"text/plain": {}, "text/event-stream": {}},
        }
    },
)
async def job_logs(
    request: Request,
    job_id: JobId,
    access: JobAccess,
    state: StateDep,
    follow: bool = Query(False, description="stream new lines as Server-Sent Events"),
    learner: Annotated[
        int | None, Query(ge=1, description="only this learner's lines"), QueryDigits
    ] = None,
    last_event_id: str | None = Header(
        None,
        alias="Last-Event-ID",
        json_schema_extra={"pattern": POSITION.pattern},
        description="with follow=true, resume after this event (the id of the last one seen)",
    ),
) -> StreamingResponse:
    learners = _learners(logs_service.most_learners(access.job), learner)
    try:
        position = decode_position(last_event_id) if last_event_id else Position()
    except ValueError as exc:
        raise DlaasError(str(exc), field="Last-Event-ID") from None
    if not follow and _wants_events(request):
        return StreamingResponse(
            logs_service.log_line_events(state, job_id, learners),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache"},
        )
    if not follow:
        return StreamingResponse(
            logs_service.log_text(state, job_id, learners), media_type="text/plain; charset=utf-8"
        )
    events = await logs_service.followed(state, access.principal.id, job_id, learners, position)
    return StreamingResponse(
        events,
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


@router.get(
    "/{job_id}/metrics",
    response_class=StreamingResponse,
    responses={200: {"model": MetricList, "content": {"application/json": {}}}},
)
async def job_metrics(
    job_id: JobId,
    access: JobAccess,
    state: StateDep,
    learner: Annotated[
        int | None, Query(ge=1, description="only this learner's points"), QueryDigits
    ] = None,
    last: Annotated[
        int | None,
        Query(ge=1, le=1000, description="only the last N points of each learner"),
        QueryDigits,
    ] = None,
    limit: Annotated[
        int | None,
        Query(ge=1, le=MAX_LIMIT, description="points per page; leave out for all points"),
        QueryDigits,
    ] = None,
    cursor: Cursor = None,
) -> Response:
    learners = _learners(logs_service.most_learners(access.job), learner)
    if limit is not None or cursor is not None:
        start = metric_position(cursor) if cursor else MetricPosition(learners[0])
        points, after = await logs_service.metric_page(
            state, job_id, learners, limit or DEFAULT_LIMIT, start
        )
        following = orjson.dumps(metric_cursor(after) if after is not None else None)
        body = b'{"metrics":[' + b",".join(points) + b'],"next":' + following + b"}"
        return Response(body, media_type="application/json")
    if last is not None:
        stream = logs_service.latest_points(state, job_id, learners, last)
    else:
        stream = logs_service.metric_points_json(state, job_id, learners)
    return StreamingResponse(stream, media_type="application/json")
