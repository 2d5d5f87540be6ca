"""FfDL's event notification endpoints, `/v1/models/{id}/events/{event_type}[/{endpoint_id}]`.

FfDL meant them for URLs to call back on a training's events. dlaas calls no one back: a
job's events are read (`GET /v2/jobs/{id}/events`, `GET /v1/models/{id}` for its status), so
there is no event type that takes endpoints. Each operation answers as FfDL's specification
documents for one: 404, "the model or event type cannot be found", saying where the events
are; nothing is stored. An unknown model is a 404 naming model_id, as everywhere on /v1.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Body, Path

from api.errors import NotFound
from api.ffdl_v1.access import ModelAccess
from api.ffdl_v1.schemas import Endpoint, EndpointList, EventEndpointRegistration

router = APIRouter(prefix="/v1/models/{model_id}/events", tags=["v1"], include_in_schema=False)

EventType = Annotated[str, Path(max_length=100, description="FfDL's event type")]
EndpointId = Annotated[str, Path(max_length=200, description="a notification endpoint's id")]


def _no_event_type(model_id: str, event_type: str) -> NotFound:
    return NotFound(
        f"event type {event_type!r} takes no notification endpoints: dlaas calls no URL "
        f"back on a training's events; poll GET /v1/models/{model_id} for its status, or "
        f"read its events with GET /v2/jobs/{model_id}/events",
        code="no_event_endpoints",
        field="event_type",
    )


@router.get("/{event_type}", response_model=EndpointList)
async def get_event_type_endpoints(access: ModelAccess, event_type: EventType) -> EndpointList:
    raise _no_event_type(access.job.id, event_type)


@router.get("/{event_type}/{endpoint_id}", response_model=Endpoint)
async def get_event_endpoint(
    access: ModelAccess, event_type: EventType, endpoint_id: EndpointId
) -> Endpoint:
    raise _no_event_type(access.job.id, event_type)


@router.post("/{event_type}/{endpoint_id}")
async def create_event_endpoint(
    access: ModelAccess,
    event_type: EventType,
    endpoint_id: EndpointId,
    callback_url: Annotated[EventEndpointRegistration | None, Body()] = None,
) -> None:
    raise _no_event_type(access.job.id, event_type)


@router.delete("/{event_type}/{endpoint_id}")
async def delete_event_endpoint(
    access: ModelAccess, event_type: EventType, endpoint_id: EndpointId
) -> None:
    raise _no_event_type(access.job.id, event_type)
