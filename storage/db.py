"""Database engines and sessions for SQLite and PostgreSQL (async drivers)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import event
from sqlalchemy.ext.asyncio import (
    AsyncEngine,
    AsyncSession,
    async_sessionmaker,
    create_async_engine,
)


def is_sqlite(url: str) -> bool:
    return url.startswith("sqlite")


def make_engine(url: str, *, pool_size: int = 10, timeout_s: float | None = None) -> AsyncEngine:
    """An engine; with `timeout_s`, no connection, statement or wait for a pooled connection
    to a database server takes longer than that (it raises instead)."""
    if is_sqlite(url):
        engine = create_async_engine(url, connect_args={"timeout": 30})
        _tune_sqlite(engine)
        return engine
    bounded: dict[str, Any] = {}
    if timeout_s is not None:
        bounded = {
            "connect_args": {"timeout": timeout_s, "command_timeout": timeout_s},
            "pool_timeout": timeout_s,
        }
    return create_async_engine(
        url, pool_size=pool_size, max_overflow=pool_size, pool_pre_ping=True, **bounded
    )


def _tune_sqlite(engine: AsyncEngine) -> None:
    @event.listens_for(engine.sync_engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        cursor = dbapi_connection.cursor()
        # WAL lets the API read while the lifecycle manager writes; foreign keys are off by
        # default in SQLite.
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute("PRAGMA busy_timeout=30000")
        cursor.close()


def make_sessionmaker(engine: AsyncEngine) -> async_sessionmaker[AsyncSession]:
    return async_sessionmaker(engine, expire_on_commit=False)


def sync_url(url: str) -> str:
    """The same database through a synchronous driver (for Alembic)."""
    return url.replace("+asyncpg", "+psycopg").replace("+aiosqlite", "")
