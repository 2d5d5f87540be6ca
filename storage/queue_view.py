"""The queue as the last scheduling pass left it: every waiting job in order, with its
place, why it waits and when it is expected to start. The lifecycle manager writes it at
every pass; `GET /v2/queue` and `dlaas queue` read it.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any

from redis.asyncio import Redis as AsyncRedis

QUEUE_KEY = "dlaas:queue"


@dataclass(frozen=True)
class QueuedJob:
    job_id: str
    team: str
    position: int  # 1 = next to start
    cause: str  # `lifecycle_manager.scheduler.WaitCause` value
    reason: str
    estimated_start: datetime | None = None


@dataclass(frozen=True)
class QueueView:
    at: datetime  # when the pass ran
    jobs: list[QueuedJob] = field(default_factory=list)


def encode_queue(view: QueueView) -> str:
    def when(value: datetime | None) -> str | None:
        return value.isoformat() if value is not None else None

    jobs = [{**asdict(job), "estimated_start": when(job.estimated_start)} for job in view.jobs]
    return json.dumps({"at": view.at.isoformat(), "jobs": jobs})


def decode_queue(raw: str | bytes | None) -> QueueView | None:
    if raw is None:
        return None
    try:
        data: Any = json.loads(raw)
        jobs = [
            QueuedJob(
                **{
                    **item,
                    "estimated_start": datetime.fromisoformat(item["estimated_start"])
                    if item.get("estimated_start")
                    else None,
                }
            )
            for item in data["jobs"]
        ]
        return QueueView(at=datetime.fromisoformat(data["at"]), jobs=jobs)
    except (ValueError, TypeError, KeyError):
        return None


async def apublish_queue(redis: AsyncRedis, view: QueueView) -> None:
    await redis.set(QUEUE_KEY, encode_queue(view))


async def aread_queue(redis: AsyncRedis) -> QueueView | None:
    return decode_queue(await redis.get(QUEUE_KEY))
