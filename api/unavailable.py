"""Which of the API's dependencies an exception says is down or too slow, if any.

A request that fails because the database, Redis or the object store did not answer is a
503 naming that dependency, not a 500: the client should retry, and the operator look there.
"""

from __future__ import annotations

import asyncio

from botocore.exceptions import ConnectionError as BotoConnectionError
from botocore.exceptions import ReadTimeoutError as BotoReadTimeout
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from sqlalchemy.exc import DBAPIError
from sqlalchemy.exc import TimeoutError as PoolTimeoutError

DATABASE = "database"
REDIS = "redis"
OBJECT_STORE = "object store"


def unavailable_dependency(error: BaseException) -> str | None:
    """`database`, `redis` or `object store` when `error` (or what caused it) is that
    dependency failing to answer; None for anything else."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        found = _classify(current)
        if found is not None:
            return found
        current = current.__cause__ or current.__context__
    return None


def _classify(error: BaseException) -> str | None:
    if isinstance(error, RedisConnectionError | RedisTimeoutError):
        return REDIS
    if isinstance(error, PoolTimeoutError):
        return DATABASE
    if isinstance(error, DBAPIError) and (
        error.connection_invalidated or _is_timeout_or_os_error(error.orig)
    ):
        return DATABASE
    if isinstance(error, BotoConnectionError | BotoReadTimeout):
        return OBJECT_STORE
    if _is_timeout_or_os_error(error) and _raised_by_database_driver(error):
        return DATABASE
    return None


def _is_timeout_or_os_error(error: BaseException | None) -> bool:
    return isinstance(error, TimeoutError | asyncio.TimeoutError | ConnectionError | OSError)


def _raised_by_database_driver(error: BaseException) -> bool:
    """asyncpg's connect timeout and refused connections reach the API as plain
    TimeoutError/OSError raised from its own frames."""
    traceback = error.__traceback__
    while traceback is not None:
        module = traceback.tb_frame.f_globals.get("__name__", "")
        if module.startswith(("asyncpg", "sqlalchemy")):
            return True
        traceback = traceback.tb_next
    return False
