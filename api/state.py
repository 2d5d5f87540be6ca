"""What the API process holds for its lifetime: settings, database, Redis, object store."""

from __future__ import annotations

from dataclasses import dataclass, field

from redis.asyncio import Redis
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from api.archive import ArchiveLimits
from api.auth import TokenCache
from api.nudge import Nudger
from storage.object_store import ObjectStore
from storage.settings import Settings


@dataclass
class ApiState:
    settings: Settings
    engine: AsyncEngine
    sessions: async_sessionmaker[AsyncSession]
    redis: Redis
    objects: ObjectStore
    nudger: Nudger
    archive_limits: ArchiveLimits
    # what the tokens seen lately stand for (`api.auth`)
    tokens: TokenCache = field(default_factory=TokenCache)
