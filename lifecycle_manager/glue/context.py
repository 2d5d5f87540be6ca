"""What the lifecycle manager's operations work with: database, cluster, Redis, objects.

A process opens one from its settings (`lifecycle_manager.entrypoints.wiring`); tests build
one around what they started."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

import redis.asyncio as aioredis
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from lifecycle_manager.backends.base import ClusterBackend
from storage.models import utcnow
from storage.object_store import ObjectStore
from storage.settings import Settings


@dataclass(frozen=True)
class Timings:
    stop_wait_s: float = 5.0  # how long halt and delete wait for learners to go, per try
    restart_grace_s: float = 2.0  # SIGTERM to SIGKILL for the learners of a broken gang
    requeue_after_s: float = 5.0  # a QUEUED job unchanged this long lost its nudge
    deploy_grace_s: float = 15.0  # a learner not seen this long after a change is lost
    redeploy_after_s: float = 5.0  # a DEPLOYING job missing learners this long is deployed again


async def no_pass() -> None:
    """Asks for nothing: a context whose tests run their scheduling passes themselves."""
    return None


@dataclass
class Context:
    settings: Settings
    engine: AsyncEngine
    sessions: async_sessionmaker[AsyncSession]
    backend: ClusterBackend
    redis: aioredis.Redis
    objects: ObjectStore
    # Runs a RECOVERING job's next attempt after a delay (Celery in the service, direct in tests).
    schedule_recovery: Callable[[str, float], Awaitable[None]]
    # Asks for a scheduling pass soon (a Celery task in the service; tests run their own).
    request_pass: Callable[[], Awaitable[None]] = field(default=no_pass)
    timings: Timings = field(default_factory=Timings)
    clock: Callable[[], datetime] = utcnow

    def age(self, moment: datetime) -> float:
        """Seconds since `moment` (SQLite hands back naive datetimes: they are UTC)."""
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=UTC)
        return (self.clock() - moment).total_seconds()

    async def aclose(self) -> None:
        await self.backend.aclose()
        await self.redis.aclose()
        await self.engine.dispose()
