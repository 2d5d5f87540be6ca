"""What the lifecycle manager's operations work with: database, cluster, Redis, objects."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

import redis.asyncio as aioredis
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from lifecycle_manager.backends import open_backend
from lifecycle_manager.backends.base import ClusterBackend
from lifecycle_manager.glue.recovery_dispatch import RecoveryDispatcher
from storage import streams
from storage.db import make_engine, make_sessionmaker
from storage.models import utcnow
from storage.object_store import ObjectStore, open_object_store
from storage.settings import Settings


@dataclass(frozen=True)
class Timings:
    stop_wait_s: float = 5.0  # how long halt and delete wait for learners to go, per try
    restart_grace_s: float = 2.0  # SIGTERM to SIGKILL for the learners of a broken gang
    requeue_after_s: float = 5.0  # a QUEUED job unchanged this long lost its nudge
    deploy_grace_s: float = 15.0  # a learner not seen this long after a change is lost
    redeploy_after_s: float = 5.0  # a DEPLOYING job missing learners this long is deployed again


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


def open_context(settings: Settings, timings: Timings | None = None) -> Context:
    engine = make_engine(settings.database_url, pool_size=2)
    return Context(
        settings=settings,
        engine=engine,
        sessions=make_sessionmaker(engine),
        backend=open_backend(settings),
        redis=streams.async_client(settings.redis_url),
        objects=open_object_store(settings),
        schedule_recovery=RecoveryDispatcher(settings.redis_url),
        timings=timings or Timings(),
    )
