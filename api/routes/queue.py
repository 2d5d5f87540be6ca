"""/v2/queue: the waiting jobs in the order they will start, and why each waits."""

from __future__ import annotations

from fastapi import APIRouter

from api.access import Allowed
from api.deps import RedisDep, SessionDep
from api.pagination import PageQuery
from api.queue_schemas import QueueList
from api.routes.jobs import TeamFilter
from api.services.queue import queue_page

router = APIRouter(prefix="/v2/queue", tags=["queue"])


@router.get("", response_model=QueueList)
async def queue(
    session: SessionDep, redis: RedisDep, user: Allowed, page: PageQuery, team: TeamFilter = None
) -> QueueList:
    """Your teams' waiting jobs (a platform admin: every one) as the last scheduling pass
    left them, first to start first, each with its place in the whole queue, why it waits
    and when it should start; `at` says when that pass ran (null: none has yet)."""
    return await queue_page(session, redis, user, team, page)
