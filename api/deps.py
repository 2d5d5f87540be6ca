"""Request dependencies, named so route signatures read like sentences."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import Depends, Path, Request
from redis.asyncio import Redis
from sqlalchemy.ext.asyncio import AsyncSession

from api.auth import Principal, authenticate
from api.state import ApiState
from storage.jobs import JOB_ID_PATTERN
from storage.object_store import ObjectStore

JobId = Annotated[
    str,
    Path(
        pattern=JOB_ID_PATTERN,
        max_length=40,
        description="a job's id, as `POST /v2/jobs` answered it (e.g. training-k3m9x2abcd)",
    ),
]


def get_state(request: Request) -> ApiState:
    state: ApiState = request.app.state.dlaas
    return state


StateDep = Annotated[ApiState, Depends(get_state)]


async def get_session(state: StateDep) -> AsyncIterator[AsyncSession]:
    async with state.sessions() as session:
        yield session


SessionDep = Annotated[AsyncSession, Depends(get_session)]


async def get_principal(request: Request, state: StateDep) -> Principal:
    return await authenticate(request.headers.get("authorization"), state)


CurrentUser = Annotated[Principal, Depends(get_principal)]


def get_objects(state: StateDep) -> ObjectStore:
    return state.objects


ObjectsDep = Annotated[ObjectStore, Depends(get_objects)]


def get_redis(state: StateDep) -> Redis:
    return state.redis


RedisDep = Annotated[Redis, Depends(get_redis)]
