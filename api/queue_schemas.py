"""The queue as `GET /v2/queue` shows it: the waiting jobs in the order they will start."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, Field

from api.schemas import NextCursor


class QueuedJobPublic(BaseModel):
    id: str
    name: str
    team: str
    owner: str
    position: int = Field(description="its place in the whole queue: 1 starts next")
    cause: str = Field(description="why it waits, as a code (e.g. quota, capacity)")
    reason: str = Field(description="why it waits, in words")
    estimated_start: datetime | None = Field(description="null: no estimate")
    submitted_at: datetime


class QueueList(BaseModel):
    at: datetime | None = Field(
        description="when the scheduling pass that left this queue ran; null: none has yet"
    )
    jobs: list[QueuedJobPublic]
    next: NextCursor = None
