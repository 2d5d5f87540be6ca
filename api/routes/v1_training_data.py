"""FfDL's logs and metrics of a model: `/v1/models/{id}/logs` and `/metrics` (the text and
records so far, or followed), `/v1/logs/{id}/loglines` and `/emetrics` (pages of records),
read through /v2's log and metric services."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import aclosing
from dataclasses import dataclass
from typing import Annotated, Literal

import orjson
from fastapi import APIRouter, Depends, Query
from fastapi.responses import StreamingResponse

from api.deps import SessionDep, StateDep
from api.ffdl_v1.access import ModelAccess, Version
from api.ffdl_v1.mapping import (
    DEFAULT_PAGE_SIZE,
    Record,
    Window,
    emetrics,
    log_line,
    metric_data,
    metric_ms,
    parse_since,
    sse_records,
)
from api.ffdl_v1.schemas import EMetricsList, LogLinesList
from api.pagination import MAX_LIMIT, MetricPosition
from api.services import lists
from api.services import logs as logs_service
from api.services.log_join import Position
from api.state import ApiState
from storage.models import Job

router = APIRouter(tags=["v1"], include_in_schema=False)

Follow = Annotated[bool, Query(description="stream new records as they come")]
SinceTime = Annotated[
    str | None,
    Query(
        max_length=40,
        description="RFC 3339 time or milliseconds since 1970 to start from; a negative "
        "number: the last that many records",
    ),
]
SearchType = Annotated[
    Literal["TERM", "NESTED", "MATCH", "ALL"] | None,
    Query(alias="searchType", description="FfDL's search type: every one reads the records"),
]
PageSize = Annotated[int, Query(ge=1, le=MAX_LIMIT, description="records to return")]
Pos = Annotated[
    int,
    Query(
        ge=-(2**62),
        le=2**62,
        description="the 1-based record to start at; negative: that many from the end",
    ),
]
_OCTETS = "application/octet-stream"


def _all_learners(job: Job) -> list[int]:
    return list(range(1, logs_service.most_learners(job) + 1))


async def _as_text(events: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    """A followed log's lines as text, without the events' framing."""
    async for chunk in events:
        lines = [str(data.get("line", "")) + "\n" for data in sse_records(chunk)]
        if lines:
            yield "".join(lines).encode()


@dataclass(frozen=True)
class StreamQuery:
    """FfDL's query of a training's log or metrics stream."""

    follow: Follow = False
    since_time: SinceTime = None
    version: Version = None


StreamQueryDep = Annotated[StreamQuery, Depends()]


@router.get("/v1/models/{model_id}/logs", response_class=StreamingResponse)
async def get_logs(
    access: ModelAccess, state: StateDep, query: StreamQueryDep
) -> StreamingResponse:
    """The training log as text, every learner's lines in time order; with follow=true,
    streamed until the training stops. (`since_time` is taken and not applied: the lines
    of a stored log carry no time; `/v1/logs/{id}/loglines` pages them.)"""
    job, learners = access.job, _all_learners(access.job)
    if not query.follow:
        return StreamingResponse(logs_service.log_text(state, job.id, learners), media_type=_OCTETS)
    # the follow slot is taken before the answer starts: one too many is a 429, not a cut stream
    events = await logs_service.followed(state, access.principal.id, job.id, learners, Position())
    return StreamingResponse(
        _as_text(events), media_type=_OCTETS, headers={"X-Accel-Buffering": "no"}
    )


async def _metric_points(state: ApiState, job: Job) -> AsyncIterator[dict[str, object]]:
    """Every metric point of the job, learner after learner, a page at a time."""
    start: MetricPosition | None = MetricPosition(1)
    learners = _all_learners(job)
    while start is not None:
        points, start = await logs_service.metric_page(state, job.id, learners, MAX_LIMIT, start)
        for point in points:
            yield orjson.loads(point)


async def _metric_lines(state: ApiState, job: Job, since_ms: int | None) -> AsyncIterator[bytes]:
    async for point in _metric_points(state, job):
        ms = metric_ms(point)
        if since_ms is None or ms is None or ms >= since_ms:
            yield metric_data(point).model_dump_json(by_alias=True).encode() + b"\n"


@router.get("/v1/models/{model_id}/metrics", response_class=StreamingResponse)
async def get_metrics(
    access: ModelAccess, state: StateDep, query: StreamQueryDep
) -> StreamingResponse:
    """The training's metrics so far, one FfDL MetricData JSON object a line (`follow` is
    taken; the points so far are sent, as /v2 does)."""
    since = parse_since(query.since_time)
    return StreamingResponse(_metric_lines(state, access.job, since.time_ms), media_type=_OCTETS)


async def _owner(session: SessionDep, job: Job) -> str:
    [shown] = await lists.public_jobs(session, [job])
    return shown.owner


async def _log_records(state: ApiState, job: Job) -> AsyncIterator[Record]:
    number = 0
    async for lines in logs_service.lines_in_time_order(state, job.id, _all_learners(job)):
        for line in lines:
            number += 1
            ms = None if line.time is None else int(line.time * 1000)
            yield Record(number, ms, line.text)


async def _metric_records(state: ApiState, job: Job) -> AsyncIterator[Record]:
    number = 0
    async for point in _metric_points(state, job):
        number += 1
        yield Record(number, metric_ms(point), point)


async def _page(records: AsyncIterator[Record], window: Window) -> list[Record]:
    """What `window` takes of `records`, read no further than it needs."""
    async with aclosing(records):  # type: ignore[type-var]
        async for record in records:
            if window.offer(record):
                break
    return window.records()


@dataclass(frozen=True)
class RecordQuery:
    """FfDL's query of a page of training records."""

    since_time: SinceTime = None
    pagesize: PageSize = DEFAULT_PAGE_SIZE
    pos: Pos = 0
    search_type: SearchType = None
    version: Version = None

    def window(self) -> Window:
        return Window(self.pagesize, self.pos, parse_since(self.since_time))


RecordQueryDep = Annotated[RecordQuery, Depends()]


Source = Callable[[ApiState, Job], AsyncIterator[Record]]


async def _page_of(
    access: ModelAccess, state: ApiState, session: SessionDep, query: RecordQuery, source: Source
) -> tuple[str, str, list[Record]]:
    """The model's id, its owner's name and the records of `source` the query asks for."""
    job = access.job
    records = await _page(source(state, job), query.window())
    return job.id, await _owner(session, job), records


@router.get("/v1/logs/{model_id}/loglines", response_model=LogLinesList)
async def get_loglines(
    access: ModelAccess, state: StateDep, session: SessionDep, query: RecordQueryDep
) -> LogLinesList:
    """A page of the training's log lines as FfDL's records."""
    job_id, owner, records = await _page_of(access, state, session, query, _log_records)
    return LogLinesList(models=[log_line(job_id, owner, r) for r in records])


@router.get("/v1/logs/{model_id}/emetrics", response_model=EMetricsList)
async def get_emetrics(
    access: ModelAccess, state: StateDep, session: SessionDep, query: RecordQueryDep
) -> EMetricsList:
    """A page of the training's evaluation metrics as FfDL's records."""
    job_id, owner, records = await _page_of(access, state, session, query, _metric_records)
    return EMetricsList(models=[emetrics(job_id, owner, r) for r in records])
